"""Python kernels the tests of @offload.kernel share (host tests, PTX tests, GPU tests)."""
import numpy as np

import offload
from offload import prange


@offload.kernel
def saxpy(y, x, a, n):
    for i in offload.prange(n):
        y[i] += a * x[i]


@offload.kernel
def stencil(u, v):
    n, m = u.shape
    for i in prange(1, n - 1):
        for j in range(1, m - 1):
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@offload.kernel
def total(a, out):
    s = 0.0
    for i in prange(a.size):
        s += a[i]
    out[0] = s


@offload.kernel
def largest(a, out):
    m = -np.inf
    for i in prange(a.shape[0]):
        m = max(m, a[i])
    out[0] = m


@offload.kernel
def dot(a, b, out):
    s = 0.0
    for i in offload.prange(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


@offload.kernel
def reverse_twice(a, b, n):
    """Two loops: the second reads what the first wrote, in the other order."""
    for i in prange(n):
        a[i] = 3 * i
    for i in prange(n):
        b[i] = a[n - 1 - i] + 1


@offload.kernel
def histogram(data, bins, lo, width):
    for i in prange(data.shape[0]):
        k = int((data[i] - lo) / width)
        if 0 <= k < bins.shape[0]:
            offload.atomic_add(bins, k, 1)


@offload.kernel
def extremes(a, hi, lo):
    for i in prange(a.shape[0]):
        offload.atomic_max(hi, 0, a[i])
        offload.atomic_min(lo, 0, a[i])


@offload.kernel
def strided(a, start, stop, step):
    for i in prange(start, stop, step):
        a[i] += 1


@offload.kernel
def add_one(a):
    for i in prange(a.size):
        a[i] += 1


@offload.kernel(signature=["float32[:]", "int64"])
def typed_fill(a, n):
    for i in prange(n):
        a[i] = 7.0


@offload.kernel
def grid_marks(a, jstart, jstep):
    """A prange over rows around a range over columns (spread over threads together)."""
    for i in prange(a.shape[0]):
        for j in range(jstart, a.shape[1], jstep):
            a[i, j] += i * 1000 + j


def grid_marks_ref(a, jstart, jstep):
    for i in range(a.shape[0]):
        for j in range(jstart, a.shape[1], jstep):
            a[i, j] += i * 1000 + j


@offload.kernel
def odd_only(a):
    """A prange body that ends some iterations early."""
    for i in prange(a.shape[0]):
        if i % 2 == 0:
            continue
        a[i] += 1


@offload.kernel
def row_sums(u, out):
    """A scalar the loop body sets itself and then adds to: not a reduction."""
    for i in prange(u.shape[0]):
        t = 0.0
        for j in range(u.shape[1]):
            t += u[i, j]
        out[i] = t


# indices that may be negative keep Python's wraparound (tests/pykernels/test_pykernels_indices.py)
@offload.kernel
def shift_back(a, b):
    for i in prange(a.shape[0]):
        b[i] = a[i - 1]                  # i = 0 reads a[-1]


@offload.kernel
def shift_two(a, b):
    n, m = a.shape
    for i in prange(1, n):
        for j in range(2, m):
            b[i, j] = a[i - 2, j - 2] + a[i - 1, j - 2]     # i = 1 reads row -1


@offload.kernel
def reassigned(a, b):
    for i in prange(2, a.shape[0]):
        k = i
        i = k - 3                        # no longer the loop's value: may be -1
        b[k] = a[i]
