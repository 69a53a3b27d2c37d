"""@offload.kernel on a CUDA GPU (issue 32): the same Python kernels as on the host, now
as PTX from numba-cuda behind offload's entries, give numpy's results; a kernel of several
phases runs them in order. Skipped with the reason where there is no CUDA device."""
import warnings

import numpy as np
import pytest

import offload
from tests import pykernels_defs as K
from tests.plugins.cuda.test_cuda import NUM, WHY

pytest.importorskip("numba.cuda", reason="kernels written in Python need numba-cuda")
pytestmark = pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}")


@pytest.fixture
def cu(runtime):
    runtime(OFFLOAD_PLUGINS="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", offload.OffloadWarning)   # no silent host fallback
        yield 0


def test_saxpy_and_stencil(cu):
    x = np.arange(100_000, dtype=np.float32)
    y = np.ones_like(x)
    offload.target(K.saxpy, y, x, 2.5, x.size, map=[offload.to(x), offload.tofrom(y)],
                   device=cu)
    np.testing.assert_allclose(y, 1 + 2.5 * x)
    u = np.random.default_rng(0).random((301, 517))
    v = np.zeros_like(u)
    offload.target(K.stencil, u, v, map=[offload.to(u), offload.tofrom(v)], device=cu)
    ref = np.zeros_like(u)
    ref[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    np.testing.assert_allclose(v, ref)
    assert K.stencil.compiles["cuda"] >= 1


@pytest.mark.parametrize("threads", [None, 96, 33])       # whole warps, and not
def test_reductions_sum_max_dot(cu, threads):
    a = np.random.default_rng(1).random(1_000_003)
    b = np.random.default_rng(2).random(1_000_003)
    out = np.zeros(1)
    offload.target(K.total, a, out, device=cu, threads=threads)
    assert out[0] == pytest.approx(a.sum(), rel=1e-9)
    offload.target(K.largest, a, out, device=cu, threads=threads)
    assert out[0] == a.max()
    offload.target(K.dot, a, b, out, device=cu, threads=threads, teams=7)
    assert out[0] == pytest.approx(np.dot(a, b), rel=1e-9)


def test_two_loops_and_ranges(cu):
    n = 100_000
    a = np.zeros(n, dtype=np.int64)
    b = np.zeros(n, dtype=np.int64)
    offload.target(K.reverse_twice, a, b, n, device=cu)
    np.testing.assert_array_equal(a, 3 * np.arange(n))
    np.testing.assert_array_equal(b, 3 * (n - 1 - np.arange(n)) + 1)
    for start, stop, step in [(3, 100, 7), (99, -1, -3), (10, 0, 1)]:
        c = np.zeros(100, dtype=np.int32)
        offload.target(K.strided, c, start, stop, step, device=cu)
        ref = np.zeros(100, dtype=np.int32)
        ref[list(range(start, stop, step))] += 1
        np.testing.assert_array_equal(c, ref)


def test_a_scalar_the_body_sets_itself_is_not_reduced(cu):
    u = np.random.default_rng(5).random((400, 300))
    out = np.zeros(400)
    offload.target(K.row_sums, u, out, device=cu)
    np.testing.assert_allclose(out, u.sum(axis=1))


def test_continue_in_a_prange_body(cu):
    a = np.zeros(100_001, dtype=np.int32)
    offload.target(K.odd_only, a, device=cu)
    np.testing.assert_array_equal(a, np.arange(a.size) % 2)


def test_atomics(cu):
    data = np.random.default_rng(3).random(200_000)
    bins = np.zeros(10, dtype=np.int64)
    offload.target(K.histogram, data, bins, 0.0, 0.1, device=cu)
    np.testing.assert_array_equal(bins, np.histogram(data, 10, (0.0, 1.0))[0])
    for dt in (np.int32, np.float64):
        a = (np.random.default_rng(4).random(30_000) * 1000 - 500).astype(dt)
        hi, lo = np.full(1, -10**6, dt), np.full(1, 10**6, dt)
        offload.target(K.extremes, a, hi, lo, device=cu)
        assert (hi[0], lo[0]) == (a.max(), a.min())


def test_nowait_chain_and_prelocked(cu):
    a = np.zeros(1 << 20, dtype=np.int64)
    with offload.locked(a, device=cu):
        with offload.target_data(offload.tofrom(a), device=cu):
            h = offload.target(K.add_one, a, device=cu, nowait=True)
            for _ in range(4):
                h = offload.target(K.add_one, a, device=cu, nowait=True, depend=[h])
            h.wait()
    np.testing.assert_array_equal(a, 5)


@pytest.mark.parametrize("shape,jstart,jstep", [((37, 1001), 1, 3), ((5, 3), 4, 1),
                                                ((1000, 7), 0, 1)])
@pytest.mark.parametrize("teams", [None, 3])
def test_collapsed_loops_cover_every_element_once(cu, shape, jstart, jstep, teams):
    a = np.zeros(shape, dtype=np.int64)
    offload.target(K.grid_marks, a, jstart, jstep, device=cu, teams=teams)
    ref = np.zeros(shape, dtype=np.int64)
    K.grid_marks_ref(ref, jstart, jstep)
    np.testing.assert_array_equal(a, ref)


def test_indices_that_may_be_negative_still_wrap(cu):
    """Only subscripts known to be >= 0 lose numba's wraparound (test_pykernels_indices)."""
    a = np.arange(1000.0)
    b = np.zeros_like(a)
    offload.target(K.shift_back, a, b, map=[offload.to(a), offload.from_(b)], device=cu)
    np.testing.assert_array_equal(b, np.roll(a, 1))
    a2 = np.random.default_rng(0).random((40, 70))
    b2 = np.zeros_like(a2)
    offload.target(K.shift_two, a2, b2, map=[offload.to(a2), offload.tofrom(b2)], device=cu)
    ref = np.zeros_like(a2)
    ref[1:, 2:] = np.roll(a2, 2, axis=0)[1:, :-2] + np.roll(a2, 1, axis=0)[1:, :-2]
    np.testing.assert_array_equal(b2, ref)
    c = np.arange(80.0)
    d = np.zeros_like(c)
    offload.target(K.reassigned, c, d, map=[offload.to(c), offload.tofrom(d)], device=cu)
    np.testing.assert_array_equal(d[2:], c[np.arange(2, 80) - 3])
