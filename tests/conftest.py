import os
import re

import numpy as np
import pytest

import offload
from offload import plugin_manager

# the AMDGPU tests' fixtures over the HSA simulator double, for every test module
from tests.amdgpu_support import amd, code_objects, kernels, sim  # noqa: F401

plugin_manager.BUILTIN.setdefault("recording", "tests.fakes.recording:RecordingPlugin")
plugin_manager.BUILTIN.setdefault("pitched", "tests.fakes.recording:PitchedPlugin")
plugin_manager.BUILTIN.setdefault("bouncing", "tests.fakes.recording:BouncingPlugin")
plugin_manager.BUILTIN.setdefault("noimage", "tests.fakes.recording:NoImagePlugin")

_ENV = ("OMP_TARGET_OFFLOAD", "OMP_DEFAULT_DEVICE", "LIBOMPTARGET_INFO",
        "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS", "OFFLOAD_PLUGINS", "OFFLOAD_HOST_NUM_DEVICES",
        "OFFLOAD_HOST_ASYNC", "OFFLOAD_ACCEL", "LIBOMPTARGET_PROFILE",
        "LIBOMPTARGET_PROFILE_GRANULARITY")


def vmlck_kb() -> int:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmLck:\s+(\d+) kB", f.read()).group(1))


#: the mapping core the whole suite runs against: OFFLOAD_ACCEL=0 in the environment of
#: pytest selects the pure-Python twin for every test that does not choose one itself
#: (scripts/check.sh runs the suite both ways, as CPython tests its C accelerators)
ACCEL = os.environ.get("OFFLOAD_ACCEL")


@pytest.fixture
def runtime(monkeypatch, tmp_path_factory):
    """A fresh runtime on host devices; call with env overrides: runtime(OFFLOAD_...=...)."""
    cache = str(tmp_path_factory.getbasetemp() / "offload-cache")

    def start(**env):
        offload.shutdown()
        for k in _ENV:
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("OFFLOAD_CACHE_DIR", cache)
        env.setdefault("OFFLOAD_PLUGINS", "host")
        if ACCEL is not None:
            env.setdefault("OFFLOAD_ACCEL", ACCEL)
        for k, v in env.items():
            monkeypatch.setenv(k, str(v))
        return offload.runtime.current().manager

    yield start
    offload.shutdown()


@pytest.fixture
def python_sigint():
    """SIGINT with Python's own handler while the test runs, whatever this process
    inherited (a job started in the background of a shell ignores SIGINT, and offload
    leaves an ignored SIGINT alone): request it before `runtime`."""
    import signal

    from offload import interrupts
    before, installed = signal.getsignal(signal.SIGINT), interrupts._Sigint.installed
    ours = before is interrupts._deferring_sigint
    if not ours:            # the next runtime to start installs offload's deferral
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupts._Sigint.installed = False
    yield
    if not ours:
        signal.signal(signal.SIGINT, before)
        interrupts._Sigint.installed = installed


@pytest.fixture
def rt(runtime):
    """A fresh runtime with two host devices."""
    return runtime(OFFLOAD_HOST_NUM_DEVICES=2)


@pytest.fixture
def recording(runtime):
    """A fresh runtime whose only plugin is the recording host double; yields the plugin."""
    m = runtime(OFFLOAD_PLUGINS="recording", OFFLOAD_HOST_NUM_DEVICES=2)
    return m.plugins[0]


@pytest.fixture(scope="session")
def add_one():
    return offload.compile_c(
        "void add_one(int *a, long lo, long hi) { for (long i = lo; i < hi; ++i) a[i] += 1; }\n"
        "void scale(double *a, long n, double f) { for (long i = 0; i < n; ++i) a[i] *= f; }\n"
        "void inc64(long long *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n"
        "void nothing(void) {}\n")


def page_aligned(nbytes: int, dtype=np.uint8) -> np.ndarray:
    """A page-aligned array (so VmLck arithmetic is exact)."""
    raw = np.zeros(nbytes + 2 * 4096, dtype=np.uint8)
    off = (-raw.ctypes.data) % 4096
    return raw[off:off + nbytes].view(dtype)
