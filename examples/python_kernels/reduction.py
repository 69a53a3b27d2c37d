"""Reductions written once in Python (@offload.kernel): a sum and a maximum reduced by a
prange loop into scalars, a dot product, and a histogram with offload.atomic_add, run on
whatever device exists; checked against numpy. Prints PASS.

Usage: python examples/python_kernels/reduction.py [N]
"""
import sys

import numpy as np

import offload


@offload.kernel
def stats(a, out):
    total = 0.0
    top = -np.inf
    for i in offload.prange(a.shape[0]):
        total += a[i]
        top = max(top, a[i])
    out[0] = total
    out[1] = top


@offload.kernel
def dot(a, b, out):
    s = 0.0
    for i in offload.prange(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


@offload.kernel
def histogram(a, bins, lo, width):
    for i in offload.prange(a.shape[0]):
        k = int((a[i] - lo) / width)
        if 0 <= k < bins.shape[0]:
            offload.atomic_add(bins, k, 1)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rng = np.random.default_rng(0)
    a, b = rng.random(n), rng.random(n)
    out = np.zeros(2)
    offload.target(stats, a, out, map=[offload.to(a), offload.from_(out)])
    ok = np.isclose(out[0], a.sum(), rtol=1e-9) and out[1] == a.max()
    d = np.zeros(1)
    offload.target(dot, a, b, d, map=[offload.to(a), offload.to(b), offload.from_(d)])
    ok = ok and np.isclose(d[0], np.dot(a, b), rtol=1e-9)
    bins = np.zeros(16, dtype=np.int64)
    offload.target(histogram, a, bins, 0.0, 1 / 16, map=[offload.to(a), offload.tofrom(bins)])
    ok = ok and (bins == np.histogram(a, 16, (0.0, 1.0))[0]).all()
    where = offload.devices()[0].name if offload.devices() else "the host"
    print(f"sum {out[0]:.6f}, max {out[1]:.6f}, dot {d[0]:.6f}, histogram {bins.tolist()} "
          f"on {where}")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
