"""The CUDA plugin where other software and faults meet it (review items in the
docstrings): staged transfers that stop
before they raise (no GPU needed), other libraries' contexts, waits Ctrl-C reaches, a
kernel fault, ranges another library registered in part. The rest skip with the reason
without a GPU."""
import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.plugins.staging import Staging
from tests.cuda_faults_support import ROOT, blocks, cu, gpu, k, run_script, two_gpus  # noqa: F401 - cu, k: fixtures


# ---- 1. staged transfers stop before they raise (no GPU needed) ----------------------
class _SlowHooks:
    """Staging hooks over plain memory: copies are memmoves, one worker fails mid-way."""

    def __init__(self):
        self.bufs = []
        self.fail_at = 3
        self.calls = 0
        self.lock = threading.Lock()

    def _alloc_staging_impl(self, size):
        b = np.zeros(size, np.uint8)
        self.bufs.append(b)
        return b.ctypes.data, None

    def _free_staging_impl(self, addr, q):
        pass

    def _sync_impl(self, q):
        pass

    def _submit_impl(self, tgt, host, size, q, pinned):
        self._retrieve_impl(tgt, host, size, q, pinned)

    def _retrieve_impl(self, host, tgt, size, q, pinned):
        with self.lock:
            self.calls += 1
            n = self.calls
        time.sleep(0.002)
        if n == self.fail_at:
            raise RuntimeError("a DMA failed")
        ctypes.memmove(host, tgt, size)


def test_failed_staged_copy_stops_every_worker_before_raising():
    """Review 1: when the copy fails (or is interrupted), the workers are stopped and
    waited for before the call raises: no chunk is written into the caller's memory
    afterwards."""
    hooks = _SlowHooks()
    st = Staging(hooks, 1 << 12, 8)
    src = np.ones(1 << 20, np.uint8)
    dst = np.zeros(1 << 20, np.uint8)
    with pytest.raises(RuntimeError, match="a DMA failed"):
        st.copy(False, src.ctypes.data, dst.ctypes.data, src.nbytes)
    written = dst.copy()
    calls = hooks.calls
    time.sleep(0.1)
    assert hooks.calls == calls                 # nobody is still copying ...
    np.testing.assert_array_equal(dst, written)  # ... nor writing into dst
    assert written.sum() < src.nbytes           # it really stopped part-way
    st.close()


# ---- 2. other libraries change the current context ---------------------------------------
@gpu
def test_foreign_context_does_not_capture_our_memory(cu, k):
    """Review 2: a context another library makes current (cuCtxCreate) receives none of
    our allocations or pins; destroying it takes nothing of ours."""
    lib = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    assert lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0       # now current
    n = 1 << 16
    a = np.arange(n, dtype=np.int32)
    pin = offload.lock(a, device=0)
    offload.target_enter_data(offload.to(a), device=0)
    assert lib.cuCtxDestroy_v2(ctx) == 0
    offload.target(k.add_one, a, 0, n, device=0, **blocks(n))
    offload.target_exit_data(offload.from_(a), device=0)
    np.testing.assert_array_equal(a, np.arange(n) + 1)
    assert cu.query(a.ctypes.data, a.nbytes) is not None          # still registered
    pin.unlock()


@two_gpus
def test_allocation_lands_on_its_device_whatever_is_current(cu):
    """Review 2: after someone makes device 1's context current, device 0's allocation
    is still on device 0."""
    d1 = cu.device(1)
    lib = ctypes.CDLL("libcuda.so.1")
    assert lib.cuCtxSetCurrent(ctypes.c_void_p(int(offload.plugins.cuda._ffi.cast(
        "uintptr_t", d1.context)))) == 0
    p = offload.omp_target_alloc(4096, 0)
    ordinal = ctypes.c_int(-1)
    assert lib.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(p)) == 0
    assert ordinal.value == 0
    offload.omp_target_free(p, 0)


# ---- 3. waits block, and Ctrl-C reaches them ------------------------------------------------
@gpu
def test_primary_context_blocks_in_waits():
    """Review 3: blocking-sync scheduling, as LLVM sets it (when offload is first to use
    the primary context: a fresh process)."""
    out = run_script("""
        import offload
        cu = offload.runtime.current().manager.plugins[0]
        dev = cu.device(0)
        from offload.plugins.cuda import _ffi
        flags, active = _ffi.new("unsigned int *"), _ffi.new("int *")
        cu.drv.lib.cuDevicePrimaryCtxGetState(dev.cu_device, flags, active)
        print("state", active[0], flags[0])
    """, OFFLOAD_PLUGINS="cuda")
    active, flags = map(int, out.stdout.split()[1:3])
    assert active and flags & 0x4, out.stdout + out.stderr


@gpu
def test_ctrl_c_reaches_a_program_waiting_on_a_hung_kernel(tmp_path):
    """Review 3: SIGINT during the wait for a kernel that never ends raises
    KeyboardInterrupt (the process can then exit)."""
    code = """
        import numpy as np, offload, sys
        k = offload.compile_cuda('extern "C" __global__ void spin(int *f) '
                                 '{ while (((volatile int *)f)[0] == 0) {} }')
        a = np.zeros(1, np.int32)
        print("waiting", flush=True)
        try:
            offload.target(k.spin, a, map=[offload.tofrom(a)], device=0)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            import os; os._exit(0)
        print("returned?", flush=True)
    """
    path = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=path, OFFLOAD_PLUGINS="cuda"))
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("Ctrl-C did not reach the wait")
    assert "interrupted" in out, err[-2000:]


# ---- 4. a kernel fault ---------------------------------------------------------------------
@gpu
def test_kernel_fault_names_the_kernel_and_later_calls_fail_fast():
    """Review 4: the error names the faulting kernel and CUDA's error; later calls fail at
    once with it; shutdown returns."""
    out = run_script("""
        import numpy as np, offload
        k = offload.compile_cuda('extern "C" __global__ void bad(int *a) { *(int *)16 = 1; }')
        a = np.zeros(4, np.int32)
        try:
            offload.target(k.bad, a, map=[offload.tofrom(a)], device=0)
        except offload.OffloadError as exc:
            print("first:", exc.message)
        try:
            offload.target_enter_data(offload.to(a), device=0)
        except offload.OffloadError as exc:
            print("later:", exc.message)
        print("alloc:", offload.omp_target_alloc(64, 0))
        offload.shutdown()
        print("done")
    """, OFFLOAD_PLUGINS="cuda")
    assert out.returncode == 0, out.stderr[-2000:]
    first = next(ln for ln in out.stdout.splitlines() if ln.startswith("first:"))
    assert "kernel 'bad' faulted" in first and "CUDA_ERROR_ILLEGAL_ADDRESS" in first
    later = next(ln for ln in out.stdout.splitlines() if ln.startswith("later:"))
    assert "kernel 'bad' faulted" in later
    assert "alloc: 0" in out.stdout and "done" in out.stdout
    assert "kernel 'bad' faulted" in out.stderr          # the C-convention error line


# ---- 5. ranges another library registered in part -------------------------------------------
@gpu
def test_partly_foreign_registrations_are_refused_clearly(cu, k):
    """Review 5: a range only partly inside another library's registration is not
    recorded as pinned; one holding a foreign registration gets its own error; mapping
    such memory still works (through our own pinned buffers)."""
    lib = ctypes.CDLL("libcuda.so.1")
    raw = np.zeros((4 << 20) + 8192, np.uint8)
    base = raw.ctypes.data + (-raw.ctypes.data) % 4096
    a = np.frombuffer((ctypes.c_int32 * (1 << 20)).from_address(base), np.int32)
    a[:] = np.arange(a.size)
    cu.device(0).activate()                  # a live context current for the raw calls
    assert lib.cuMemHostRegister_v2(ctypes.c_void_p(base), ctypes.c_size_t(1 << 20), 0) == 0
    try:
        with pytest.raises(OffloadError, match="partly registered by another library") as ei:
            offload.lock(a, device=0)
        assert ei.value.code is ErrorCode.INVALID_ARGUMENT
        mid = a[(2 << 20) // 4:]
        lib2 = ctypes.c_void_p(base + (3 << 20))
        assert lib.cuMemHostRegister_v2(lib2, ctypes.c_size_t(4096), 0) == 0
        try:
            with pytest.raises(OffloadError, match="overlaps host memory another library "
                                                   "registered"):
                offload.lock(mid, device=0)
        finally:
            lib.cuMemHostUnregister(lib2)
        offload.target(k.add_one, a, 0, a.size, map=[offload.tofrom(a)], device=0,
                       **blocks(a.size))
        np.testing.assert_array_equal(a, np.arange(a.size) + 1)
        assert offload.testing.state()["pins"]["cuda"]["entries"] == 0
    finally:
        lib.cuMemHostUnregister(ctypes.c_void_p(base))


