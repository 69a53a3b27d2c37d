"""The Python twin of LLVM's offload/test/mapping/prelock.cpp.

Lock an array, map it tofrom and add one, map a[10:20] and add one again,
unlock, check. Prints PASS and how many bytes moved, by which path.
Usage: python examples/prelock.py [device] [n]
"""
import sys
import time

import numpy as np

import offload

SOURCE = """
void add_one(int *a, long lo, long hi) { for (long i = lo; i < hi; ++i) a[i] += 1; }
"""


def kernels() -> offload.Image:
    """Host kernels, plus CUDA ones where NVRTC can build them."""
    host = offload.compile_c(SOURCE)
    try:
        gpu = offload.compile_cuda(
            'extern "C" __global__ void add_one(int *a, long lo, long hi) {'
            " long i = lo + blockIdx.x * (long)blockDim.x + threadIdx.x;"
            " if (i < hi) a[i] += 1; }")
        return offload.Image.combine(gpu, host)
    except offload.OffloadError:
        return host


def main() -> int:
    device = int(sys.argv[1]) if len(sys.argv) > 1 else offload.omp_get_default_device()
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    k = kernels()
    a = np.arange(n, dtype=np.int32)
    expect = np.arange(n, dtype=np.int32) + 1
    expect[10:20] += 1
    threads = 256

    t0 = time.perf_counter()
    with offload.locked(a, device=device) as pinned:
        offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=device,
                       teams=(n + threads - 1) // threads, threads=threads)
        offload.target(k.add_one, a, 10, 20, map=[offload.tofrom(a[10:20])], device=device,
                       teams=1, threads=threads)
    elapsed = time.perf_counter() - t0

    ok = np.array_equal(a, expect) and not pinned.locked
    dev = offload.runtime.current().manager.get_device(device) if device < offload.omp_get_num_devices() else None
    where = f"device {device} ({dev.plugin.name})" if dev else "the initial device"
    print(f"prelock on {where}: {n} ints, {elapsed * 1e3:.2f} ms")
    if dev is not None:
        s = dev.stats
        print(f"  host->device: {s['to pinned']} bytes pinned, {s['to unpinned']} bytes unpinned")
        print(f"  device->host: {s['from pinned']} bytes pinned, "
              f"{s['from unpinned']} bytes unpinned")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
