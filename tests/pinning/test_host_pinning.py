"""Real mlock pinning through the host plugin and the public API."""
import os

import numpy as np
import pytest
from hypothesis import settings

import offload
from offload import ErrorCode, OffloadError
from offload.plugins.host import PAGE
from tests.host_pinning_support import HostPinMachine

from tests.conftest import page_aligned, vmlck_kb


def test_lock_rejects_bad_sizes_and_null(recording, capsys):
    a = np.zeros(100, np.uint8)
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).lock(a.ctypes.data, 0)
    assert ei.value.code is ErrorCode.INVALID_VALUE
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).lock(0, 10)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    assert offload.llvm_omp_target_lock_mem(a, -1, 0) == 0
    assert recording.of("lock") == []


def test_lock_inside_entry_is_counted_fast_path(recording):
    a = np.zeros(10000, np.uint8)
    p = a.ctypes.data
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == p
    assert offload.llvm_omp_target_lock_mem(p + 100, 50, 0) == p + 100
    assert len(recording.of("lock")) == 1
    assert recording.pinned.lookup(p).count == {0: 2}
    offload.llvm_omp_target_unlock_mem(p + 120, 0)
    offload.llvm_omp_target_unlock_mem(p, 0)
    assert recording.of("unlock") == [("unlock", 0, p, a.nbytes, True)]


def test_lock_twice_unlock_twice(recording):
    a = page_aligned(4 * PAGE)
    base = vmlck_kb()
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert vmlck_kb() - base == 16
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert vmlck_kb() == base


def test_partial_overlap_rejected_before_driver_call(recording, capsys):
    """§5 row: LLVM pins first, then fails the insert, leaking the pin."""
    a = np.zeros(8192, np.uint8)
    p = a.ctypes.data
    offload.llvm_omp_target_lock_mem(p + 1000, 1000, 0)
    calls = len(recording.calls)
    for start, n in ((p + 500, 1000), (p + 1500, 1000), (p + 500, 3000)):
        assert offload.llvm_omp_target_lock_mem(start, n, 0) == 0
    assert len(recording.calls) == calls
    assert "partial overlapping not allowed in locked buffers" in capsys.readouterr().err
    assert len(recording.pinned) == 1
    offload.llvm_omp_target_unlock_mem(p + 1000, 0)


def test_spanning_two_entries_rejected(recording):
    a = np.zeros(8192, np.uint8)
    p = a.ctypes.data
    offload.llvm_omp_target_lock_mem(p, 100, 0)
    offload.llvm_omp_target_lock_mem(p + 200, 100, 0)
    with pytest.raises(OffloadError, match="partial overlapping"):
        offload.runtime.current().manager.get_device(0).lock(p + 50, 200)
    assert len(recording.pinned) == 2


def test_failed_pin_leaves_state_unchanged(runtime, monkeypatch):
    """§5 row: a failed insert leaves nothing behind (here the driver itself fails)."""
    m = runtime(OFFLOAD_PLUGINS="recording")
    plugin = m.plugins[0]

    def boom(*a, **k):
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "mlock failed (injected)")

    monkeypatch.setattr(plugin.pages, "lock", boom)
    a = np.zeros(100, np.uint8)
    base = vmlck_kb()
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == 0
    assert len(plugin.pinned) == 0 and vmlck_kb() == base
    with pytest.raises(OffloadError) as ei:
        offload.lock(a, device=0)
    assert ei.value.code is ErrorCode.OUT_OF_RESOURCES


def test_mlock_beyond_rlimit_names_the_limit(runtime):
    """Past RLIMIT_MEMLOCK (in a child without CAP_IPC_LOCK): OUT_OF_RESOURCES naming it."""
    import subprocess
    import sys
    code = (
        "import ctypes, resource, numpy as np, offload\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))\n"
        "# CAP_IPC_LOCK ignores the limit: drop it from this process (capget/capset, v3)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
        "data = (ctypes.c_uint32 * 6)()\n"
        "assert libc.capget(hdr, data) == 0\n"
        "data[0] &= ~(1 << 14); data[1] &= ~(1 << 14)   # effective, permitted\n"
        "assert libc.capset(hdr, data) == 0, ctypes.get_errno()\n"
        "a = np.zeros(16 << 20, np.uint8)\n"
        "try:\n"
        "    offload.lock(a, device=0)\n"
        "    print('LOCKED')\n"
        "except offload.OffloadError as e:\n"
        "    print(e.code.name, str(e))\n")
    env = dict(os.environ, OFFLOAD_PLUGINS="host",
               PYTHONPATH=os.pathsep.join(filter(None, [
                   os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")),
                   os.environ.get("PYTHONPATH")])),
               OFFLOAD_CACHE_DIR="/tmp/offload-rlimit-test")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    if "LOCKED" in out.stdout:
        pytest.skip("this process may lock past RLIMIT_MEMLOCK (CAP_IPC_LOCK kept)")
    assert "OUT_OF_RESOURCES" in out.stdout, out.stderr
    assert "RLIMIT_MEMLOCK is 65536 bytes" in out.stdout


def test_unlock_of_never_locked_is_not_found(recording, capsys):
    a = np.zeros(10, np.uint8)
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert "cannot find locked buffer" in capsys.readouterr().err
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)
    assert ei.value.code is ErrorCode.NOT_FOUND
    assert recording.of("unlock") == []


def test_unlock_once_too_often(recording):
    a = np.zeros(10, np.uint8)
    offload.llvm_omp_target_lock_mem(a, 10, 0)
    offload.llvm_omp_target_unlock_mem(a, 0)
    with pytest.raises(OffloadError, match="cannot find locked buffer"):
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)


def test_same_range_for_two_devices_one_pin(recording):
    """§5 row: one registry entry, one driver pin, unpinned after the last device."""
    a = page_aligned(2 * PAGE)
    base = vmlck_kb()
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 1)
    assert [c[4] for c in recording.of("lock")] == [True, False]
    assert len(recording.pinned) == 1
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert vmlck_kb() - base == 8
    offload.llvm_omp_target_unlock_mem(a, 1)
    assert vmlck_kb() == base
    assert [c[4] for c in recording.of("unlock")] == [False, True]


def test_unlock_on_other_device_is_not_found(recording):
    a = np.zeros(64, np.uint8)
    offload.llvm_omp_target_lock_mem(a, 64, 0)
    with pytest.raises(OffloadError, match="cannot find locked buffer"):
        offload.runtime.current().manager.get_device(1).unlock(a.ctypes.data)
    offload.llvm_omp_target_unlock_mem(a, 0)


def test_two_entries_sharing_a_page_do_not_unpin_each_other(recording):
    a = page_aligned(PAGE)
    p = a.ctypes.data
    base = vmlck_kb()
    offload.llvm_omp_target_lock_mem(p, 100, 0)
    offload.llvm_omp_target_lock_mem(p + 200, 100, 0)
    offload.llvm_omp_target_unlock_mem(p, 0)
    assert vmlck_kb() - base == 4
    offload.llvm_omp_target_unlock_mem(p + 200, 0)
    assert vmlck_kb() == base


# the model-checked pins (the machine in host_pinning_support)
TestHostPinMachine = HostPinMachine.TestCase
TestHostPinMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
