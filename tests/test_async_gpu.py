"""Issue 14 on a CUDA GPU: device-side fills (cuMemsetD8Async, no host round trip),
async copies with dependences, strided updates through the generic layer. Skipped, with
the reason, where there is no CUDA device."""
import time

import numpy as np
import pytest

import offload
from tests.test_cuda_faults import NUM, WHY

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
