"""A 2-D Jacobi stencil written once in Python (@offload.kernel), run on whatever device
exists (a GPU if there is one, else the host), the grid kept on the device between
steps; checked against numpy. Prints PASS.

Usage: python examples/python_kernels/stencil.py [N] [STEPS]
"""
import sys
import time

import numpy as np

import offload


@offload.kernel
def jacobi(u, v):
    n, m = u.shape
    for i in offload.prange(1, n - 1):
        for j in range(1, m - 1):
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    u = np.zeros((n, n))
    u[0, :] = 1.0                                  # a hot edge
    v = u.copy()
    ref_u, ref_v = u.copy(), v.copy()
    t = time.perf_counter()
    with offload.target_data(offload.tofrom(u), offload.tofrom(v)):
        for _ in range(steps // 2):                # u -> v -> u: the arrays stay mapped
            offload.target(jacobi, u, v)
            offload.target(jacobi, v, u)
    took = time.perf_counter() - t
    for _ in range(steps // 2):
        ref_v[1:-1, 1:-1] = 0.25 * (ref_u[:-2, 1:-1] + ref_u[2:, 1:-1] + ref_u[1:-1, :-2]
                                    + ref_u[1:-1, 2:])
        ref_u[1:-1, 1:-1] = 0.25 * (ref_v[:-2, 1:-1] + ref_v[2:, 1:-1] + ref_v[1:-1, :-2]
                                    + ref_v[1:-1, 2:])
    where = offload.devices()[0].name if offload.devices() else "the host"
    ok = np.allclose(u, ref_u) and np.allclose(v, ref_v)
    print(f"{steps} steps of a {n}x{n} stencil on {where}: {took * 1e3:.1f} ms "
          f"(first call compiles)")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
