"""The AMDGPU plugin's queues, events and strided copies on the HSA simulator (issue 14):
signals of its own, barrier-AND packets, SDMA rect copies."""
import ctypes

import numpy as np
import pytest

import offload


# ---- queues and events (issue 14): signals of their own, barrier-AND packets ----------------
def test_events_and_queue_waits_on_hsa(amd, sim):
    """A copy queued on q1, an event recorded after it, q2 ordered after the event by a
    barrier-AND (no host wait), then a copy back on q2: the data went through in order."""
    n = 32 << 20
    src = np.random.default_rng(5).integers(0, 255, n, dtype=np.uint8)
    out = np.zeros(n, dtype=np.uint8)
    d = offload.omp_target_alloc(n, 0)
    gen = offload.runtime.current().device(0).generic
    with offload.locked(src, device=0) as ps, offload.locked(out, device=0) as po:
        for _ in range(5):
            out[:] = 0
            q1, q2 = offload.stream(0), offload.stream(0)
            gen._submit_impl(d, src.ctypes.data, n, q1.queue, ps.device_address)
            ev = q1.record()
            q2.wait_event(ev)
            gen._retrieve_impl(out.ctypes.data, d, n, q2.queue, po.device_address)
            q2.synchronize()
            assert ev.query()
            np.testing.assert_array_equal(out, src)
            q1.close()
            q2.close()
    empty = offload.stream(0)
    assert empty.record().query()                      # nothing queued: complete at once
    empty.close()
    offload.omp_target_free(d, 0)


# ---- strided updates as SDMA rect copies (issue 14: hsa_amd_memory_async_copy_rect) ----
@pytest.mark.parametrize("lock", [False, True])
def test_strided_update_is_one_rect_copy(amd, sim, lock):
    """A column block of a locked array is one hsa_amd_memory_async_copy_rect from the
    agent address; an unpinned one over the staging threshold is packed into staging
    buffers and moved by rect copies; the data lands exactly, both ways, no fault."""
    sim.hsa_sim_rect_copies.restype = ctypes.c_long
    a = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)      # 1 MiB, rows 4 KiB
    orig = a.copy()
    if lock:
        offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    faults = sim.hsa_sim_faults()
    with offload.target_data(offload.to(a), device=0):
        before = sim.hsa_sim_rect_copies()
        a[:] = -1
        offload.target_update(from_=[a[:, 256:768]], device=0)
        rects = sim.hsa_sim_rect_copies() - before
        assert rects == 1 if lock else rects >= 1
        want = np.full_like(a, -1)
        want[:, 256:768] = orig[:, 256:768]
        assert (a == want).all()
        a[:, 0:128] = 5
        offload.target_update(to=[a[:, 0:128]], device=0)
        a[:] = 0
        offload.target_update(from_=[a], device=0)
        want[:, 0:128] = 5
        want[:, 128:256] = orig[:, 128:256]
        want[:, 768:] = orig[:, 768:]
        assert (a == want).all()
    assert sim.hsa_sim_faults() == faults
    if lock:
        offload.llvm_omp_target_unlock_mem(a, 0)


def test_strided_update_unaligned_falls_back_to_rows(amd, sim):
    """ROCr's rect copies need 4-byte alignment: an odd byte column goes row by row."""
    sim.hsa_sim_rect_copies.restype = ctypes.c_long
    a = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    orig = a.copy()
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    with offload.target_data(offload.to(a), device=0):
        before = sim.hsa_sim_rect_copies()
        a[:] = 0
        offload.target_update(from_=[a[:, 3:10]], device=0)
        assert sim.hsa_sim_rect_copies() == before
        want = np.zeros_like(a)
        want[:, 3:10] = orig[:, 3:10]
        assert (a == want).all()
    offload.llvm_omp_target_unlock_mem(a, 0)


def test_a_wait_cut_short_never_recycles_a_signal_still_pending(amd, sim):
    """A queue's wait that a device error cuts short (the fresh-clone repeated runs under
    load: test_queue_error_becomes_an_offload_error's last region copied back before its
    kernel ran): the queue's signals went back to the pool while an operation still held
    one, the next operation was handed it, and the late one completed it — a kernel's
    completion seen early, its result never copied back. Only finished signals (and, with
    every signal finished, the kernel arguments) are given back."""
    dev = offload.runtime.current().device(0).generic
    pool = amd.signals
    pending = pool.get()                          # value 1: an operation still holds it
    finished = pool.get()
    amd.hsa.lib.hsa_signal_store_relaxed(finished, 0)
    q = dev.get_queue()
    q.last, q.signals = pending, [finished, pending]
    dev.error = "queue stopped on an error: HSA_STATUS_ERROR_EXCEPTION (injected)"
    try:
        with pytest.raises(offload.OffloadError, match="queue stopped"):
            dev._sync_impl(q)
    finally:
        dev.error = None
    handles = {s.handle for s in pool._free}
    assert finished.handle in handles
    assert pending.handle not in handles          # kept out until the process ends
    assert q.signals == [] and q.last is None
