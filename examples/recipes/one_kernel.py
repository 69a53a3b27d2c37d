"""Recipe: one kernel for the host and the GPU.

Two ways. (1) The same kernel written for each target, bundled: `compile_c` gives the
host binary, `compile_cuda` (NVRTC) the CUDA one, and `Image.combine` makes one image
whose `k.saxpy` runs on whichever device `target` is given, the host included. (2) The
region written once in OpenMP: `compile_openmp` (clang-19) builds it for the host and
for CUDA devices. Both run here on every device there is. Prints PASS.
Usage: python examples/recipes/one_kernel.py
"""
import argparse
import sys

import numpy as np

import offload

HOST = "void saxpy(float *y, const float *x, float a, long n) " \
       "{ for (long i = 0; i < n; ++i) y[i] += a * x[i]; }"
CUDA = r"""extern "C" __global__ void saxpy(float *y, const float *x, float a, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}"""
OPENMP = """
void saxpy(float *y, const float *x, float a, long n) {
#pragma omp target teams distribute parallel for map(tofrom: y[0:n]) map(to: x[0:n])
  for (long i = 0; i < n; ++i) y[i] += a * x[i];
}
"""


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    images = [offload.compile_c(HOST)]
    try:
        images.append(offload.compile_cuda(CUDA))
    except offload.OffloadError as exc:      # no NVRTC: the host binary alone
        print(f"no CUDA binary: {exc}")
    k = offload.Image.combine(*images)
    n = 1 << 20
    x = np.ones(n, np.float32)
    ok = True
    devices = [d.number for d in offload.devices()] + [offload.omp_get_initial_device()]
    for dev in devices:
        y = np.zeros(n, np.float32)
        offload.target(k.saxpy, y, x, 2.0, n, map=[offload.tofrom(y), offload.to(x)],
                       device=dev, teams=(n + 255) // 256, threads=256)
        ok &= bool((y == 2.0).all())
    mod = offload.compile_openmp(OPENMP)
    y = np.zeros(n, np.float32)
    mod.saxpy(y, x, 3.0, n)
    ok &= bool((y == 3.0).all())
    print(f"ran on devices {devices} (bundled) and through compile_openmp")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
