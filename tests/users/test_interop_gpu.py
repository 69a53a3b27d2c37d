"""On a CUDA GPU with the real libraries: CuPy and PyTorch see offload's device
copy (same pointer, no copy), offload takes theirs, and streams order mixed pipelines.
Skipped, with the reason, where there is no CUDA device or neither library."""
import numpy as np
import pytest

import offload
from tests.cuda_faults_support import NUM, WHY

cupy = pytest.importorskip("cupy") if NUM else None
torch = None
try:
    import torch  # type: ignore[no-redef]
except ImportError:
    pass

gpu = pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}")
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
pytestmark = gpu

KERNELS = r'''
extern "C" __global__ void add_one(int *a, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) a[i] += 1;
}
extern "C" __global__ void copy_slow(const int *src, int *dst, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  for (int k = 0; k < 200; ++k) __nanosleep(10000);
  if (i < n) dst[i] = src[i];
}
'''


@pytest.fixture
def k(runtime):
    runtime(OFFLOAD_PLUGINS="cuda")
    return offload.compile_cuda(KERNELS)


def blocks(n, t=256):
    return dict(teams=(n + t - 1) // t, threads=t)


def test_cupy_and_torch_see_the_device_copy(k):
    a = np.arange(1 << 16, dtype=np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        dv = offload.device_array(a, 0)
        assert dv.__dlpack_device__() == (2, 0)
        c = cupy.from_dlpack(dv)
        assert c.data.ptr == dv.ptr == offload.omp_get_mapped_ptr(a, 0)
        c2 = cupy.asarray(dv)                           # CUDA Array Interface
        assert c2.data.ptr == dv.ptr
        c += 1                                          # CuPy writes offload's copy
        cupy.cuda.get_current_stream().synchronize()
        if torch is not None:
            t = torch.from_dlpack(dv)
            assert t.data_ptr() == dv.ptr and t.is_cuda
            t += 1
            torch.cuda.synchronize()
        offload.target(k.add_one, a, a.size, device=0, **blocks(a.size))
    bumps = 3 if torch is not None else 2
    assert (a == np.arange(a.size, dtype=np.int32) + bumps).all()


def test_foreign_arrays_are_kernel_arguments_and_copy_endpoints(k):
    n = 1 << 20
    c = cupy.arange(n, dtype=cupy.int32)
    offload.target(k.add_one, c, n, device=0, **blocks(n))   # CAI, CuPy's stream waited for
    out = np.empty(n, dtype=np.int32)
    assert offload.omp_target_memcpy(out, c, out.nbytes, 0, 0,
                                     offload.omp_get_initial_device(), 0) == 0
    assert (out == np.arange(n) + 1).all()
    if torch is not None:
        t = torch.zeros(n, dtype=torch.int32, device="cuda")
        assert offload.omp_target_memcpy(t, c, out.nbytes, 0, 0, 0, 0) == 0   # device to device
        torch.cuda.synchronize()
        assert int(t[12345]) == 12346


def test_offload_waits_for_a_foreign_stream(k):
    """Work CuPy queued on its own stream (a slow kernel) finishes before offload reads."""
    n = 1 << 16
    src = cupy.arange(n, dtype=cupy.int32)
    dst = cupy.zeros(n, dtype=cupy.int32)
    s = cupy.cuda.Stream(non_blocking=True)
    slow = cupy.RawKernel(KERNELS, "copy_slow")
    with s:
        slow(((n + 255) // 256,), (256,), (src, dst, np.int64(n)))
    offload.wait_stream(s.ptr, 0)                    # an event on s, polled
    assert s.done
    out = np.empty(n, dtype=np.int32)
    offload.omp_target_memcpy(out, dst.data.ptr, out.nbytes, 0, 0,
                              offload.omp_get_initial_device(), 0)
    assert (out == np.arange(n)).all()


def test_foreign_work_on_offloads_stream_orders_before_the_region(k):
    """A CuPy kernel queued on offload's stream runs before a target region on it, with no
    host wait between them."""
    n = 1 << 16
    src = cupy.arange(n, dtype=cupy.int32)
    dst = cupy.zeros(n, dtype=cupy.int32)
    slow = cupy.RawKernel(KERNELS, "copy_slow")
    with offload.stream(0) as s:
        # CuPy takes our stream through the CUDA stream protocol (__cuda_stream__);
        # CuPy before 14 only by its handle
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        ext = from_external(s) if from_external else cupy.cuda.ExternalStream(s.handle)
        with ext:
            slow(((n + 255) // 256,), (256,), (src, dst, np.int64(n)))
        # dst's CAI names CuPy's current stream (the null stream here), which is idle
        offload.target(k.add_one, dst.data.ptr, n, device=0, stream=s, **blocks(n))
    assert (dst.get() == np.arange(n) + 1).all()


@needs_torch
def test_torch_stream_interop(k):
    n = 1 << 16
    t = torch.arange(n, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t.mul_(2)
    offload.wait_stream(side, 0)                     # torch.cuda.Stream.cuda_stream
    offload.target(k.add_one, t, n, device=0, **blocks(n))
    assert int(t[100].item()) == 201


def test_pinned_reports_cuda_host(k):
    """numpy takes kDLCUDAHost memory (PyTorch 2.11 refuses device type 3 outright)."""
    a = np.zeros(1 << 20, dtype=np.float32)
    with offload.lock(a, device=0) as pin:
        assert pin.__dlpack_device__() == (3, 0)       # kDLCUDAHost
        v = np.from_dlpack(pin)
        assert v.ctypes.data == a.ctypes.data and v.shape == a.shape


@pytest.mark.parametrize("consumer", ["cupy_dlpack", "cupy_cai", "torch"])
def test_consumers_tensor_outlives_the_mapping_and_the_runtime(k, consumer):
    """Exported device memory with real consumers: the tensor keeps its device memory after the
    mapping goes (the next mapping gets other memory) and after offload.shutdown() (the
    context kept until the tensor goes; it was a fault)."""
    if consumer == "torch" and torch is None:
        pytest.skip("PyTorch is not installed")
    a = np.arange(1 << 20, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        dv = offload.device_array(a, 0)
        t = (cupy.from_dlpack(dv) if consumer == "cupy_dlpack" else cupy.asarray(dv)
             if consumer == "cupy_cai" else torch.from_dlpack(dv))
        del dv
    b = np.zeros_like(a)
    with offload.target_data(offload.tofrom(b), device=0):
        ptr = t.data.ptr if consumer != "torch" else t.data_ptr()
        assert offload.omp_get_mapped_ptr(b, 0) != ptr
    offload.shutdown()
    t += 1
    total = int(t.sum())
    assert total == int(a.astype(np.int64).sum()) + a.size
    del t
    import gc
    gc.collect()
