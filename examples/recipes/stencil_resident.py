"""Recipe: a heat stencil kept resident on the device in a data region, with a periodic
`target update from` to look at it on the host while it runs.

The rod stays mapped for all the steps (no copies per step); every `every` steps the
host reads the current state back and checks it against numpy doing the same steps.
Prints PASS. Usage: python examples/recipes/stencil_resident.py [--cells N] [--steps S]
"""
import argparse
import sys

import numpy as np

import offload

STEP = """
void step(const double *u, double *v, long n) {
  for (long i = 1; i < n - 1; ++i) v[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
}
"""
STEP_CUDA = r"""
extern "C" __global__ void step(const double *u, double *v, long n) {
  long i = 1 + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n - 1) v[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
}
"""


def kernels() -> offload.Image:
    """The host kernel, with a CUDA twin where NVRTC is there (one kernel, any device)."""
    host = offload.compile_c(STEP)
    try:
        return offload.Image.combine(host, offload.compile_cuda(STEP_CUDA))
    except offload.OffloadError:             # no NVRTC here: the host binary alone
        return host


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=1 << 16)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--every", type=int, default=50)
    args = p.parse_args()
    k = kernels()
    u = np.zeros(args.cells)
    u[args.cells // 2] = 1000.0                  # a hot spot in the middle
    v = u.copy()
    ref = u.copy()
    threads = 256
    teams = (args.cells + threads - 1) // threads
    ok = True
    with offload.target_data(offload.tofrom(u), offload.to(v)):
        for s in range(1, args.steps + 1):
            src, dst = (u, v) if s % 2 else (v, u)
            offload.target(k.step, src, dst, args.cells, teams=teams, threads=threads)
            r = ref.copy()
            r[1:-1] = ref[1:-1] + 0.25 * (ref[:-2] - 2.0 * ref[1:-1] + ref[2:])
            ref = r
            if s % args.every == 0:
                offload.target_update(from_=[dst])       # a look while it stays resident
                ok &= bool(np.allclose(dst, ref))
                print(f"step {s}: heat {dst.sum():.6f} (numpy {ref.sum():.6f})")
    if args.steps % 2 == 0:                  # the last step wrote u, which came back
        ok &= bool(np.allclose(u, ref))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
