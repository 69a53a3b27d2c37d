"""The CUDA plugin at its limits (review items in the docstrings):
registrations in chunks, read-only arrays, launches without a queue, the pool and work in
flight, arguments, geometry, dynamic shared memory, drivers without cuFuncGetParamInfo,
peer access, fork, the JIT log. Skipped with the reason without a GPU."""
import time

import numpy as np
import pytest

import offload
from offload import OffloadError
from tests.cuda_faults_support import KERNELS, blocks, cu, gpu, k, run_script, two_gpus  # noqa: F401 - cu, k: fixtures


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
    """The plugin contract, CUDA plugin on this machine's GPU(s)."""
    from offload.config import read
    from offload.plugins.cuda import CUDAPlugin
    from offload.testing import run_conformance
    report = run_conformance(CUDAPlugin, read(), image=k)
    print(report)
    assert "kernel" in report.passed
