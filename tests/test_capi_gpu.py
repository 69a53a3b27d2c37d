"""Issue 18: clang-19 nvptx programs on offload's libomptarget.so.19.1 on an NVIDIA GPU.
tests/capi/*.c built for sm_90 (scripts/build-capi-gpu.sh on a machine with clang-19 and
the CUDA toolkit; OFFLOAD_NVPTX_PROGRAMS names the directory) must print what LLVM 19's own
runtime prints for the same programs offloaded to the host (device counts aside: the GPU
machine has its GPUs, LLVM's host plugin four devices). Skipped, with the reason, without
a CUDA device or the built programs."""
import glob
import os
import subprocess

import pytest

from tests.test_cuda_faults import NUM, WHY

PROGRAMS = os.path.abspath(os.environ["OFFLOAD_NVPTX_PROGRAMS"]) \
    if os.environ.get("OFFLOAD_NVPTX_PROGRAMS") else ""
HAVE = bool(PROGRAMS) and os.path.isdir(os.path.join(PROGRAMS, "nvptx"))
pytestmark = [
    pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}"),
    pytest.mark.skipif(not HAVE, reason="no nvptx programs: build them with "
                       "scripts/build-capi-gpu.sh and set OFFLOAD_NVPTX_PROGRAMS"),
]
NAMES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PROGRAMS, "nvptx", "*")))


def _comparable(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith("num devices")]


@pytest.fixture(scope="module")
def lib():
    from offload.capi import libdir
    return libdir()


# known failures, left open (none now; kept for the next one found)
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    reason=KNOWN[n], strict=True)) if n in KNOWN else n for n in NAMES])
def test_nvptx_program_prints_what_the_host_run_prints(lib, name):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
    env["LD_LIBRARY_PATH"] = f"{lib}:{os.path.abspath(PROGRAMS)}"
    res = subprocess.run([os.path.join(PROGRAMS, "nvptx", name)], capture_output=True,
                         text=True, env=env, timeout=300, cwd="/tmp")
    with open(os.path.join(PROGRAMS, "expected", name + ".txt")) as f:
        expected = f.read()
    rc = res.returncode if res.returncode >= 0 else 128 - res.returncode   # as the shell
    got = res.stdout + f"rc={rc}\n"
    assert _comparable(got) == _comparable(expected), res.stderr[-2000:]
