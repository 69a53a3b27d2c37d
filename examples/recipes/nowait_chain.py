"""Recipe: a chain of nowait work ordered by dependences, the host free meanwhile.

enter data (nowait) -> kernel (nowait, after it) -> exit data copying back (nowait,
after the kernel) -> a host task reading the result (after that): each step names the
Handles it waits for in `depend=`, the thread that started them goes on, and
`wait()` on the last one (or `offload.taskwait()`) joins. The kernel is bundled for the
host and, where there is one, the GPU (see one_kernel.py). Prints PASS.
Usage: python examples/recipes/nowait_chain.py [--n N]
"""
import argparse
import sys

import numpy as np

import offload

SOURCE = "void scale(double *a, long n, double f) { for (long i = 0; i < n; ++i) a[i] *= f; }"
# the same kernel for CUDA devices: a host-only kernel would run on the host's `a` while
# the chain's copy of it sits on the GPU, and the exit data's copy back would undo it
CUDA = r"""extern "C" __global__ void scale(double *a, long n, double f) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) a[i] *= f;
}"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 20)
    args = p.parse_args()
    images = [offload.compile_c(SOURCE)]
    if any(d.plugin == "cuda" for d in offload.devices()):
        images.append(offload.compile_cuda(CUDA))       # NVRTC (nvidia-cuda-nvrtc)
    k = offload.Image.combine(*images)
    a = np.arange(args.n, dtype=np.float64)
    seen = []
    entered = offload.target_enter_data(offload.to(a), nowait=True)
    scaled = offload.target(k.scale, a, a.size, 2.0, nowait=True, depend=[entered])
    left = offload.target_exit_data(offload.from_(a), nowait=True, depend=[scaled])
    check = offload.host_task(lambda: seen.append(float(a[-1])), depend=[left])
    busy = sum(range(10**5))                  # the host is free while the chain runs
    check.wait()
    offload.taskwait()                        # (and anything else this thread started)
    ok = seen == [2.0 * (args.n - 1)] and bool((a == 2.0 * np.arange(args.n)).all())
    print(f"chain done: last element {seen[0]:.1f}, host work meanwhile {busy}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
