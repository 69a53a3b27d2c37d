"""Examples/mpi_stencil.py under `mpiexec -n 2` agrees with a one-process run
(and with numpy, which the example checks itself). Skips with the reason where there is
no mpiexec or no mpi4py (scripts/test-deps.sh and the test extras install both)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "mpi_stencil.py")
MPIEXEC = shutil.which("mpiexec")

try:
    import mpi4py  # noqa: F401
    WHY = None if MPIEXEC else "no mpiexec (Debian: openmpi-bin)"
except ImportError:
    WHY = "mpi4py is not installed (pip install -e '.[test]')"

pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))


def _run(cmd):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert "PASS" in r.stdout, r.stdout
    m = re.search(r"(\d+) rank\(s\).*checksum (\S+)", r.stdout)
    assert m, r.stdout
    halo = re.search(r"halo copies while stepping: (\d+) bytes through pinned buffers, "
                     r"(\d+) bytes unpinned", r.stdout)
    assert halo and int(halo.group(1)) > 0 and halo.group(2) == "0", r.stdout  # prelocked
    return int(m.group(1)), m.group(2)


@pytest.mark.parametrize("cells,steps", [(100_003, 40), (7, 3)])
def test_two_ranks_match_one_process(cells, steps):
    args = [EXAMPLE, "--cells", str(cells), "--steps", str(steps)]
    one = _run([sys.executable, *args])
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    two = _run([MPIEXEC, *extra, "-n", "2", sys.executable, *args])
    assert one[0] == 1 and two[0] == 2
    assert one[1] == two[1]          # the same rod, to the last printed digit
