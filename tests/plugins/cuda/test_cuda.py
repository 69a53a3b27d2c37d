"""CUDA plugin on a real GPU; skipped with the reason where there is none."""
import os

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.pinned import Kind
from tests.users.test_stats import _moves


def _cuda_devices():
    from offload.config import read
    from offload.plugins.cuda import CUDAPlugin
    p = CUDAPlugin(read())
    n = p.number_of_devices()
    return n, p.reason


NUM, WHY = _cuda_devices()
pytestmark = pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}")

KERNELS = r'''
extern "C" __global__ void add_one(int *a, long lo, long hi) {
  long i = lo + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < hi) a[i] += 1;
}
extern "C" __global__ void slow_set(int *a, long n, int v) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  __nanosleep(200000);                       // ~0.2 ms a wave: a kernel that takes a while
  if (i < n) a[i] = v;
}
extern "C" __global__ void copy_f(float *dst, const float *src, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}
'''


@pytest.fixture(scope="module")
def k():
    return offload.compile_cuda(KERNELS)


@pytest.fixture
def cu(runtime):
    m = runtime(OFFLOAD_PLUGINS="cuda")
    return m.plugins[0]


def blocks(n, t=256):
    return dict(teams=(n + t - 1) // t, threads=t)


def test_prelock_twin(cu, k):
    n = 1 << 20
    a = np.arange(n, dtype=np.int32)
    with offload.locked(a, device=0) as pin:
        assert cu.query(a.ctypes.data, a.nbytes) is not None   # really registered
        offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=0, **blocks(n))
        offload.target(k.add_one, a, 10, 20, map=[offload.tofrom(a[10:20])], device=0,
                       **blocks(10))
    expect = np.arange(n, dtype=np.int32) + 1
    expect[10:20] += 1
    np.testing.assert_array_equal(a, expect)
    s = offload.runtime.current().manager.get_device(0).stats
    assert s["to unpinned"] == 0 and s["from unpinned"] == 0 and s["to pinned"] >= a.nbytes
    assert cu.query(a.ctypes.data, a.nbytes) is None            # unregistered
    assert not pin.locked


def test_numpy_scalars_and_negative_ints_as_arguments(cu, k):
    """numpy scalars pass by value like Python numbers, and an int that the reused
    argument buffers cannot hold unsigned (a negative one) takes the general packing."""
    a = np.zeros(64, np.int32)
    offload.target(k.add_one, a, np.int64(8), np.int32(16), map=[offload.tofrom(a)],
                   device=0, teams=1, threads=64)
    offload.target(k.slow_set, a, 4, np.int32(-7), map=[offload.tofrom(a)], device=0,
                   teams=1, threads=64)
    expect = np.zeros(64, np.int32)
    expect[8:16] = 1
    expect[:4] = -7
    np.testing.assert_array_equal(a, expect)
    offload.target(k.slow_set, a, 2, -9, map=[offload.tofrom(a)], device=0, teams=1,
                   threads=64)
    expect[:2] = -9
    np.testing.assert_array_equal(a, expect)


def test_ptx_image_runs(cu):
    ptx = offload.compile_cuda(KERNELS, ptx=True)
    assert ptx.binaries[0].format == "ptx" and "add_one" in ptx.kernels
    a = np.zeros(1000, np.int32)
    offload.target(ptx.add_one, a, 0, 1000, map=[offload.tofrom(a)], device=0, **blocks(1000))
    assert (a == 1).all()


def test_lock_twice_unlock_twice_one_registration(cu):
    a = np.zeros(1 << 16, np.float32)
    p1 = offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    p2 = offload.llvm_omp_target_lock_mem(a[100:], 400, 0)
    assert p1 and p2 == p1 + 400
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert cu.query(a.ctypes.data, 4) is not None
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert cu.query(a.ctypes.data, 4) is None
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)
    assert ei.value.code is ErrorCode.NOT_FOUND


def test_external_registration_recorded_never_unregistered(cu):
    a = np.zeros(1 << 20, np.uint8)
    dev = offload.runtime.current().manager.get_device(0)
    dev.generic.activate()
    lib = cu.drv.lib
    from offload.plugins.cuda import _ffi
    assert lib.cuMemHostRegister_v2(_ffi.cast("void *", a.ctypes.data), a.nbytes, 1) == 0
    try:
        addr = offload.llvm_omp_target_lock_mem(a[4096:], 100, 0)
        assert addr
        e = cu.pinned.lookup(a.ctypes.data + 4096)
        assert e.kind is Kind.EXTERNAL
        offload.llvm_omp_target_unlock_mem(a[4096:], 0)
        assert len(cu.pinned) == 0
        assert cu.query(a.ctypes.data, 1) is not None      # still theirs
    finally:
        assert lib.cuMemHostUnregister(_ffi.cast("void *", a.ctypes.data)) == 0


def test_external_registration_by_cupy_or_torch(cu):
    a = np.zeros(1 << 20, np.uint8)
    try:
        import cupy
        cupy.cuda.runtime.hostRegister(a.ctypes.data, a.nbytes, 0)
        undo = lambda: cupy.cuda.runtime.hostUnregister(a.ctypes.data)  # noqa: E731
    except Exception:
        pytest.skip("CuPy not importable here")
    try:
        assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
        assert cu.pinned.lookup(a.ctypes.data).kind is Kind.EXTERNAL
        offload.llvm_omp_target_unlock_mem(a, 0)
        assert cu.query(a.ctypes.data, 1) is not None
    finally:
        undo()


def test_read_only_array_registered_and_read(cu, k):
    n = 1 << 16
    src = np.arange(n, dtype=np.float32)
    src.flags.writeable = False
    dst = np.zeros(n, np.float32)
    with offload.locked(src, device=0):
        offload.target(k.copy_f, dst, src, n, map=[offload.to(src), offload.from_(dst)],
                       device=0, **blocks(n))
        with pytest.raises(OffloadError, match="read-only"):
            offload.target_enter_data(offload.tofrom(src), device=0)
    np.testing.assert_array_equal(dst, src)


def test_split_copy_half_pinned(cu, k):
    n = 1 << 20
    a = np.arange(n, dtype=np.int32)
    with offload.locked(a[: n // 2], device=0):
        offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=0, **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 1)
    s = offload.runtime.current().manager.get_device(0).stats
    assert s["to pinned"] == n * 2 and s["to unpinned"] == n * 2


def test_large_unpinned_round_trip_staged(cu):
    a = np.random.default_rng(1).integers(0, 1 << 30, 48 << 18, dtype=np.int32)  # 48 MiB
    b = a.copy()
    with offload.target_data(offload.tofrom(a), device=0):
        a[:] = 0
        offload.target_update(from_=[a], device=0)
        np.testing.assert_array_equal(a, b)
        a[::3] = 7
        offload.target_update(to=[a], device=0)
        a[:] = 0
    b[::3] = 7
    np.testing.assert_array_equal(a, b)


def test_kernel_then_staged_copy_back(cu, k):
    """An unpinned array large enough to be staged: the copy back must wait for the
    kernel enqueued before it (staging runs on streams of its own)."""
    n = 64 << 18                                   # 64 MiB of int32
    for v in (1, 2, 3):
        a = np.zeros(n, np.int32)
        offload.target(k.slow_set, a, n, v, map=[offload.tofrom(a)], device=0, **blocks(n))
        assert (a == v).all()
    s = offload.runtime.current().manager.get_device(0).stats
    assert s["from unpinned"] >= 3 * a.nbytes and s["from pinned"] == 0



def test_small_copies_back_are_staged_after_the_kernel(cu, k):
    """A small unpinned copy back goes through a staging buffer with a polled wait (the
    driver's own copy into pageable memory sleeps in the blocking-sync context), and
    still after the kernel that wrote it; copies to the device stay one pageable copy."""
    dev = offload.runtime.current().manager.get_device(0)
    for v in (1, 2, 3):
        a = np.zeros(64, np.int32)
        moved = _moves(lambda a=a, v=v: offload.target(
            k.slow_set, a, a.size, v, map=[offload.tofrom(a)], device=0, **blocks(a.size)))
        assert (a == v).all()
        assert moved["from_device"]["staged"] == a.nbytes, moved
        assert moved["from_device"]["pageable"] == 0 and moved["to_device"]["staged"] == 0
    assert dev.generic.stats["from staged"] >= 3 * a.nbytes

def test_enter_exit_update_round_trip(cu, k):
    a = np.zeros(4096, np.int32)
    offload.target_enter_data(offload.to(a), device=0)
    offload.target(k.add_one, a, 0, 4096, device=0, **blocks(4096))
    offload.target(k.add_one, a, 0, 100, device=0, **blocks(100))
    offload.target_update(from_=[a[:200]], device=0)
    assert (a[:100] == 2).all() and (a[100:200] == 1).all() and (a[200:] == 0).all()
    offload.target_exit_data(offload.from_(a), device=0)
    assert (a[200:] == 1).all()
    assert len(offload.runtime.current().manager.get_device(0).table) == 0


def test_alloc_kinds_and_memcpy(cu):
    init = offload.omp_get_initial_device()
    h = offload.llvm_omp_target_alloc_host(1 << 20, 0)
    d = offload.omp_target_alloc(1 << 20, 0)
    s = offload.llvm_omp_target_alloc_shared(1 << 20, 0)
    assert h and d and s
    assert cu.pinned.lookup(h).kind is Kind.ALLOC_HOST
    src = np.arange(1 << 18, dtype=np.int32)
    assert offload.omp_target_memcpy(d, src, src.nbytes, 0, 0, 0, init) == 0
    assert offload.omp_target_memcpy(h, d, src.nbytes, 0, 0, init, 0) == 0
    out = np.empty_like(src)
    assert offload.omp_target_memcpy(out, h, src.nbytes, 0, 0, init, init) == 0
    np.testing.assert_array_equal(out, src)
    offload.llvm_omp_target_free_host(h, 0)
    offload.omp_target_free(d, 0)
    offload.llvm_omp_target_free_shared(s, 0)


def test_bad_input(cu, k, capsys):
    a = np.zeros(16, np.int32)
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert "cannot find locked buffer" in capsys.readouterr().err
    with pytest.raises(OffloadError, match="out of range"):
        offload.llvm_omp_target_lock_mem(a, 64, NUM + 5)
    with pytest.raises(OffloadError, match="takes 3 argument"):
        offload.target(k.add_one, a, 0, map=[offload.tofrom(a)], device=0)
    assert len(offload.runtime.current().manager.get_device(0).table) == 0


def test_image_for_wrong_architecture(cu):
    dev = offload.runtime.current().manager.get_device(0).generic
    major = dev.sm[0]
    other = "sm_80" if major != 8 else "sm_90"
    img = offload.compile_cuda(KERNELS, arch=other)
    with pytest.raises(OffloadError) as ei:
        cu.check_binary(img.binaries[0], dev)
    assert ei.value.code is ErrorCode.INVALID_BINARY
    assert f"cubin is for {other}" in str(ei.value)
    os.environ["OMP_TARGET_OFFLOAD"] = "mandatory"
    try:
        offload.shutdown()
        a = np.zeros(4, np.int32)
        with pytest.raises(OffloadError, match="no binary for device 0"):
            offload.target(img.add_one, a, 0, 4, device=0)
    finally:
        del os.environ["OMP_TARGET_OFFLOAD"]


@pytest.mark.skipif(NUM < 2, reason="needs two CUDA devices")
def test_two_devices_one_registration(cu, k):
    n = 1 << 20
    a = np.arange(n, dtype=np.int32)
    p0 = offload.lock(a, device=0)
    p1 = offload.lock(a, device=1)
    assert len(cu.pinned) == 1
    offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=0, **blocks(n))
    offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=1, **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 2)
    p0.unlock()
    assert cu.query(a.ctypes.data, 4) is not None
    p1.unlock()
    assert cu.query(a.ctypes.data, 4) is None and len(cu.pinned) == 0
