"""Issue 19: the CUDA plugin beside other CUDA users, under faults and at scale (review:
shared/reference/cuda-review.md, item numbers in the docstrings). GPU tests skip with the
reason where there is no CUDA device; the staging test runs everywhere."""
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
from tests.harness import background

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cuda_devices():
    from offload.config import read
    from offload.plugins.cuda import CUDAPlugin
    p = CUDAPlugin(read())
    return p.number_of_devices(), p.reason


NUM, WHY = _cuda_devices()
gpu = pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}")
two_gpus = pytest.mark.skipif(NUM < 2, reason=f"needs two CUDA devices ({NUM} here)")

KERNELS = r'''
extern "C" __global__ void add_one(int *a, long lo, long hi) {
  long i = lo + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < hi) a[i] += 1;
}
extern "C" __global__ void slow_set(int *a, long n, int v) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  for (int k = 0; k < 2000; ++k) __nanosleep(100000);
  if (i < n) a[i] = v;
}
extern "C" __global__ void shared_sum(int *out, int n) {
  extern __shared__ int buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) { long s = 0; for (int i = 0; i < n; ++i) s += buf[i]; out[0] = (int)s; }
}
extern "C" __global__ void scale(float *a, long n, float f) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) a[i] *= f;
}
'''


def run_script(code, timeout=120, **env):
    path = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=path, **env))


@pytest.fixture(scope="module")
def k():
    return offload.compile_cuda(KERNELS)


@pytest.fixture
def cu(runtime):
    m = runtime(OFFLOAD_PLUGINS="cuda")
    return m.plugins[0]


def blocks(n, t=256):
    return dict(teams=(n + t - 1) // t, threads=t)


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


# ---- 6. registrations in chunks -------------------------------------------------------------------
@gpu
def test_registration_in_chunks_and_copies_split_at_them(cu, k, monkeypatch):
    """Review 6: the plugin registers big ranges in chunks (64 GiB; 1 MiB here) and no
    copy spans two of them."""
    from offload.plugins import _cuda_memory
    monkeypatch.setattr(type(cu), "pin_split", 1 << 20)
    n = (5 << 20) // 4 + 333
    a = np.arange(n, dtype=np.int32)
    with offload.locked(a, device=0):
        ranges = {_cuda_memory.registration(cu.drv, a.ctypes.data + off)
                  for off in range(0, a.nbytes, 1 << 18)}
        assert len(ranges) >= 5 and all(size <= 1 << 20 for _, size in ranges)
        offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=0, **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 1)
    assert _cuda_memory.registration(cu.drv, a.ctypes.data) is None


# ---- 7. read-only arrays ----------------------------------------------------------------------------
@gpu
def test_read_only_view_registered_writable(cu, k):
    """Review 7: a read-only view of writable memory is registered writable, so a later
    writer of the same memory can use the pin."""
    n = 4096
    a = np.arange(n, dtype=np.int32)
    view = a.view()
    view.flags.writeable = False
    with offload.locked(view, device=0):
        assert not cu.pin_is_read_only(a.ctypes.data)
        offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=0, **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 1)


@gpu
def test_read_only_pages_registered_read_only_and_writers_told(cu, k, tmp_path):
    path = tmp_path / "data.bin"
    np.arange(1 << 16, dtype=np.int32).tofile(path)
    ro = np.memmap(path, dtype=np.int32, mode="r")
    with offload.locked(ro, device=0):
        assert cu.pin_is_read_only(ro.ctypes.data)
        copy = np.zeros_like(np.asarray(ro))
        with offload.target_data(offload.to(ro), device=0):
            d = offload.omp_get_mapped_ptr(ro, 0)
            offload.omp_target_memcpy(copy, d, copy.nbytes, 0, 0,
                                      offload.omp_get_initial_device(), 0)
        np.testing.assert_array_equal(copy, np.arange(1 << 16))
    del ro


# ---- 8. launch without a queue -------------------------------------------------------------------------
@gpu
def test_launch_kernel_without_a_queue_runs_synchronously(cu, k):
    n = 1024
    d = offload.omp_target_alloc(n * 4, 0)
    zeros = np.zeros(n, np.int32)
    offload.omp_target_memcpy(d, zeros, zeros.nbytes, 0, 0, 0, offload.omp_get_initial_device())
    binary = next(b for b in k.binaries if cu.is_valid_binary(b, 0))
    cu.launch_kernel(0, binary, "add_one", [d, 0, n], teams=4, threads=256)   # no queue
    out = np.empty(n, np.int32)
    offload.omp_target_memcpy(out, d, out.nbytes, 0, 0, offload.omp_get_initial_device(), 0)
    assert (out == 1).all()
    offload.omp_target_free(d, 0)


# ---- 9. the device-memory pool and work in flight ---------------------------------------------------------
@gpu
def test_pool_never_hands_out_memory_a_kernel_still_writes(cu, k):
    """Review 9: freeing memory a nowait kernel still writes, then allocating the same
    size: the new owner's data is not overwritten."""
    n = 1 << 16
    d = offload.omp_target_alloc(n * 4, 0)
    h = offload.target(k.slow_set, d, n, 7, device=0, nowait=True, **blocks(n))
    time.sleep(0.02)
    offload.omp_target_free(d, 0)                 # (too early: the kernel runs)
    d2 = offload.omp_target_alloc(n * 4, 0)
    zeros = np.zeros(n, np.int32)
    offload.omp_target_memcpy(d2, zeros, zeros.nbytes, 0, 0, 0,
                              offload.omp_get_initial_device())
    h.wait()
    out = np.empty(n, np.int32)
    offload.omp_target_memcpy(out, d2, out.nbytes, 0, 0, offload.omp_get_initial_device(), 0)
    assert (out == 0).all()
    offload.omp_target_free(d2, 0)


# ---- 10. arguments and geometry ---------------------------------------------------------------------------
@gpu
def test_wrong_kinds_and_out_of_range_values_are_refused(cu, k):
    a = np.ones(8, np.float32)
    with pytest.raises(OffloadError, match="expected an array or a device address"):
        offload.target(k.scale, 1.0, 8, 2.0, device=0)
    with pytest.raises(OffloadError, match="expected a float, got int"):
        offload.target(k.scale, a, 8, 2, device=0, **blocks(8))
    with pytest.raises(OffloadError, match="threads per block"):
        offload.target(k.scale, a, 8, 2.0, device=0, teams=1, threads=4096)
    with pytest.raises(OffloadError, match="blocks, expected"):
        offload.target(k.scale, a, 8, 2.0, device=0, teams=2**40, threads=64)
    offload.target(k.scale, a, 8, 2.0, device=0, map=[offload.tofrom(a)], **blocks(8))
    assert (a == 2).all()


# ---- 11. dynamic shared memory ------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("n", [1024, 20000])            # 4 KiB, and 80 KiB (opt-in)
def test_dynamic_shared_memory(cu, k, n):
    out = np.zeros(1, np.int32)
    offload.target(k.shared_sum, out, n, map=[offload.from_(out)], device=0, teams=1,
                   threads=256, shared_mem=4 * n)
    assert out[0] == n * (n - 1) // 2


# ---- 12. drivers without cuFuncGetParamInfo -------------------------------------------------------------------
@gpu
def test_launch_without_param_info_uses_the_prototype(cu, k, monkeypatch):
    monkeypatch.setattr(cu.drv, "has_param_info", False)
    img = offload.compile_cuda(KERNELS + "\n// a fresh image\n")
    n = 1000
    a = np.zeros(n, np.int32)
    offload.target(img.add_one, a, 0, n, map=[offload.tofrom(a)], device=0, **blocks(n))
    assert (a == 1).all()


# ---- 13. peer access ------------------------------------------------------------------------------------------
@two_gpus
def test_device_to_device_copy_with_peer_access(cu):
    init = offload.omp_get_initial_device()
    n = 1 << 24
    src = np.arange(n, dtype=np.uint8)
    d0, d1 = offload.omp_target_alloc(n, 0), offload.omp_target_alloc(n, 1)
    assert offload.omp_target_memcpy(d0, src, n, 0, 0, 0, init) == 0
    assert offload.omp_target_memcpy(d1, d0, n, 0, 0, 1, 0) == 0
    out = np.zeros_like(src)
    assert offload.omp_target_memcpy(out, d1, n, 0, 0, init, 1) == 0
    np.testing.assert_array_equal(out, src)
    assert cu.device(0)._peers.get(1) is True
    offload.omp_target_free(d0, 0)
    offload.omp_target_free(d1, 1)


# ---- 14. fork ----------------------------------------------------------------------------------------------------
@gpu
def test_forked_child_is_told_cuda_cannot_be_used():
    out = run_script("""
        import os, numpy as np, offload
        offload.devices()                         # CUDA initialised in the parent
        k = offload.compile_cuda('extern "C" __global__ void f(int *a) { a[0] = 1; }')
        pid = os.fork()
        if pid == 0:
            try:
                offload.target(k.f, np.zeros(1, np.int32), device=0)
            except offload.OffloadError as exc:
                print("child:", exc.message, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """, OFFLOAD_PLUGINS="cuda")
    assert "CUDA was initialised before fork()" in out.stdout, out.stdout + out.stderr[-2000:]


# ---- 15. the JIT log --------------------------------------------------------------------------------------------
@gpu
def test_ptx_errors_carry_the_jit_log(cu):
    bad = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }\n"
    img = offload.load_image(bad)
    with pytest.raises(OffloadError, match="JIT log"):
        offload.target(img.k, device=0)


@gpu
def test_conformance_cuda(k):
    """Issue 17: the plugin contract, CUDA plugin on this machine's GPU(s)."""
    from offload.config import read
    from offload.plugins.cuda import CUDAPlugin
    from offload.testing import run_conformance
    report = run_conformance(CUDAPlugin, read(), image=k)
    print(report)
    assert "kernel" in report.passed
