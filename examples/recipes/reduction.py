"""Recipe: a reduction (the sum and the max of 10^7 floats) on whatever device there is.

A `compile_c` kernel runs wherever it has a binary, and on a GPU machine it has none
for the GPU: it runs on the host with one OffloadWarning (and is refused under
OMP_TARGET_OFFLOAD=mandatory). A reduction on a GPU needs a kernel that combines the
threads' partial results: here the region is written once in OpenMP and compile_openmp
(clang-19) builds it for the host and, where there are CUDA devices and a CUDA toolkit,
for them; `reduction(+:...)` and `reduction(max:...)` do the combining. Prints PASS.
Usage: python examples/recipes/reduction.py [--n N]
"""
import argparse
import sys

import numpy as np

import offload

SOURCE = """
#include <float.h>
void sum_max(const float *x, long n, double *out) {
  double s = 0.0;
  float m = -FLT_MAX;
#pragma omp target teams distribute parallel for map(to: x[0:n]) \\
    reduction(+: s) reduction(max: m)
  for (long i = 0; i < n; ++i) {
    s += x[i];
    m = x[i] > m ? x[i] : m;
  }
  out[0] = s;
  out[1] = m;
}
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10**7)
    args = p.parse_args()
    x = np.random.default_rng(7).random(args.n, dtype=np.float32)
    mod = offload.compile_openmp(SOURCE)
    out = np.zeros(2)
    mod.sum_max(x, x.size, out)
    want_sum, want_max = float(x.sum(dtype=np.float64)), float(x.max())
    print(f"devices: {[d.plugin for d in offload.devices()]}")
    print(f"sum {out[0]:.3f} (numpy {want_sum:.3f}), max {out[1]:.6f} (numpy {want_max:.6f})")
    ok = abs(out[0] - want_sum) <= 1e-6 * want_sum and out[1] == want_max
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
