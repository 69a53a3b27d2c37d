"""On a CUDA GPU: device-side fills (cuMemsetD8Async, no host round trip),
async copies with dependences, strided updates through the generic layer. Skipped, with
the reason, where there is no CUDA device."""
import time

import numpy as np
import pytest

import offload
from tests.cuda_faults_support import NUM, WHY

pytestmark = pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}")


@pytest.fixture
def cuda(runtime):
    runtime(OFFLOAD_PLUGINS="cuda")
    return 0


def test_memset_fills_on_the_device(cuda, capsys):
    n = 1 << 30
    d = offload.omp_target_alloc(n, 0)
    dev = offload.runtime.current().device(0)
    moved = dict(dev.stats)
    offload.omp_target_memset(d, 0x11, n, 0)                 # warm
    t = time.perf_counter()
    assert offload.omp_target_memset(d, 0x5A, n, 0) == d
    dt = time.perf_counter() - t
    assert dev.stats == moved                                  # no byte crossed the bus
    back = np.zeros(1 << 20, dtype=np.uint8)
    init = offload.omp_get_initial_device()
    offload.omp_target_memcpy(back, d, back.nbytes, 0, n - back.nbytes, init, 0)
    assert (back == 0x5A).all()
    with capsys.disabled():
        print(f"\n[omp_target_memset 1 GiB on the device: {n / dt / 1e12:.2f} TB/s]")
    offload.omp_target_free(d, 0)


def test_async_chain_on_the_gpu(cuda):
    n = 1 << 24
    src = np.arange(n // 4, dtype=np.int32)
    out = np.zeros_like(src)
    d = offload.omp_target_alloc(n, 0)
    h0 = offload.memset_async(d, 0, n, device=0)
    h1 = offload.memcpy_async(d, src, n, dst_device=0, depend=[h0])
    h2 = offload.memcpy_async(out, d, n, src_device=0, depend=[h1])
    h2.wait()
    assert (out == src).all()
    offload.omp_target_free(d, 0)


def test_strided_update_on_the_gpu(cuda):
    a = np.arange(64 * 2048, dtype=np.float32).reshape(64, 2048)
    orig = a.copy()
    with offload.target_data(offload.to(a), device=0):
        a[:] = -1
        offload.target_update(from_=[a[:, 512:1536]], device=0)
        want = np.full_like(a, -1)
        want[:, 512:1536] = orig[:, 512:1536]
        assert (a == want).all()
        a[::2, 3] = 5
        offload.target_update(to=[a[::2, 3]], device=0)
        b = np.zeros_like(a)
        offload.omp_target_memcpy(b, offload.omp_get_mapped_ptr(a, 0), a.nbytes, 0, 0,
                                  offload.omp_get_initial_device(), 0)
        assert (b[::2, 3] == 5).all() and (b[1::2, 3] == orig[1::2, 3]).all()


def test_queues_and_events_on_cuda(cuda):
    """CUDA events through the common layer: record, query, host wait, and a second
    stream ordered after the first with cuStreamWaitEvent."""
    n = 1 << 26
    d = offload.omp_target_alloc(n, 0)
    q1, q2 = offload.stream(0), offload.stream(0)
    assert q1.handle and q1.handle != q2.handle
    dev = offload.runtime.current().device(0)
    dev.generic._fill_impl(d, 7, n, q1.queue)           # queued, not waited for
    ev = q1.record()
    q2.wait_event(ev)
    back = np.zeros(16, dtype=np.uint8)
    q2.launch_host_function(lambda: None)               # generic fallback: waits for q2
    ev.wait()
    assert ev.query()
    offload.omp_target_memcpy(back, d, 16, 0, n - 16, offload.omp_get_initial_device(), 0)
    assert (back == 7).all()
    q1.close()
    q2.close()
    offload.omp_target_free(d, 0)


KERNELS = r'''
extern "C" __global__ void add_one(int *a, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) a[i] += 1;
}
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
'''


def test_stream_pipeline_on_cuda(cuda):
    """H2D, kernel, D2H of chunks on three CUDA streams linked by events (depend= on
    Stream work): the calls return while a spinning kernel still holds the first stream;
    the results come back in order."""
    k = offload.compile_cuda(KERNELS)
    n, chunks = 1 << 20, 8
    a = np.arange(n * chunks, dtype=np.int32)
    want = a + 1
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    parts = np.split(a, chunks)
    qs = [offload.stream(0) for _ in range(3)]
    with offload.target_data(offload.alloc(a), device=0):
        offload.target(k.spin, 200_000_000, device=0, stream=qs[0], nowait=True)  # ~0.1 s
        last = []
        for p in parts:
            h1 = offload.target_update(to=[p], device=0, stream=qs[0], nowait=True)
            h2 = offload.target(k.add_one, p, p.size, device=0, stream=qs[1], nowait=True,
                                depend=[h1], teams=p.size // 256, threads=256)
            last.append(offload.target_update(from_=[p], device=0, stream=qs[2],
                                              nowait=True, depend=[h2]))
        assert not last[-1].done()                    # all queued behind the spin
        offload.taskwait()
        assert all(h.done() for h in last)
        assert (a == want).all()
    for q in qs:
        q.close()
    offload.llvm_omp_target_unlock_mem(a, 0)


@pytest.mark.parametrize("lock", [False, True])
def test_strided_2d_copies_on_cuda(cuda, lock):
    """Column blocks as cuMemcpy2DAsync: pinned straight, unpinned packed through
    staging (blocks over the staging threshold), both directions."""
    a = np.arange(2048 * 2048, dtype=np.float32).reshape(2048, 2048)   # 16 MiB
    orig = a.copy()
    if lock:
        offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    dev = offload.runtime.current().device(0)
    with offload.target_data(offload.to(a), device=0):
        before = dict(dev.stats)
        a[:] = -1
        offload.target_update(from_=[a[:, 512:1536]], device=0)
        want = np.full_like(a, -1)
        want[:, 512:1536] = orig[:, 512:1536]
        assert (a == want).all()
        key = "from pinned" if lock else "from unpinned"
        assert dev.stats[key] - before[key] == 2048 * 1024 * 4
        a[:, 100:300] = 9
        offload.target_update(to=[a[:, 100:300]], device=0)
        b = np.zeros_like(a)
        offload.omp_target_memcpy(b, offload.omp_get_mapped_ptr(a, 0), a.nbytes, 0, 0,
                                  offload.omp_get_initial_device(), 0)
        assert (b[:, 100:300] == 9).all() and (b[:, 300:] == orig[:, 300:]).all()
    if lock:
        offload.llvm_omp_target_unlock_mem(a, 0)
