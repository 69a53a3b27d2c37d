"""Exhaustion (file descriptors, device memory) fails with an error naming
the resource, and leaves the runtime usable with nothing behind. (Locked memory past
RLIMIT_MEMLOCK: tests/capi/lock_beyond_rlimit.c and the pinning tests.)"""
import os
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.testing import state

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

FDS = r"""
import resource, sys
import numpy as np
import offload
a = np.zeros(1, np.int32)
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (12, hard))
try:
    offload.compile_c("void g(int *a) { a[0] = 7; }\n")
except offload.OffloadError as e:
    print(e.code.name, e.message.splitlines()[0])
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
m = offload.compile_c("void g(int *a) { a[0] = 7; }\n")
offload.target(m.g, a, device=0, map=[offload.tofrom(a)])
print("then", a[0])
"""


def test_out_of_file_descriptors_names_rlimit_nofile(tmp_path):
    env = dict(os.environ, OFFLOAD_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", FDS], capture_output=True, text=True,
                         env=env, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert len(lines) == 2, res.stdout
    first, then = lines
    assert first.startswith("OUT_OF_RESOURCES") and "RLIMIT_NOFILE is 12" in first, first
    assert then == "then 7"


def test_out_of_device_memory_names_the_size(rt):
    with pytest.raises(OffloadError, match=r"cannot allocate 70368744177664 bytes") as e:
        offload.empty(2**46, np.uint8, device=0)
    assert e.value.code is ErrorCode.OUT_OF_RESOURCES
    assert offload.omp_target_alloc(2**50, 0) == 0
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(2**46,), strides=(0,))
    with pytest.raises(OffloadError) as e:
        offload.target_enter_data(offload.to(big), device=0)
    assert "70368744177664" in e.value.message
    assert all(d == {"mappings": 0, "allocations": 0} for d in state()["devices"].values())
