"""The Python twin of LLVM's offload/test/mapping/prelock.cpp.

Lock an array, map it tofrom and add one, map a[10:20] and add one again,
unlock, check. Prints PASS and how many bytes moved, by which path.
Usage: python examples/prelock.py [device] [n]
"""
from __future__ import annotations

import argparse
import contextlib
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("device", nargs="?", type=int, default=None,
                        help="device number (default: the default device; the initial device, "
                             "omp_get_initial_device(), runs on the host without pinning)")
    parser.add_argument("n", nargs="?", type=int, default=1 << 20,
                        help="number of ints (default 1048576; 0 is allowed)")
    args = parser.parse_args(argv)
    device = offload.omp_get_default_device() if args.device is None else args.device
    n = args.n
    if n < 0:
        parser.error(f"n must be >= 0, got {n}")
    k = kernels()
    a = np.arange(n, dtype=np.int32)
    expect = np.arange(n, dtype=np.int32) + 1
    expect[10:20] += 1
    threads = 256
    initial = device == offload.omp_get_initial_device()

    t0 = time.perf_counter()
    # pinning is for offload devices, and needs at least one byte
    with (contextlib.nullcontext() if initial or n == 0
          else offload.locked(a, device=device)) as pinned:
        offload.target(k.add_one, a, 0, n, map=[offload.tofrom(a)], device=device,
                       teams=max(1, (n + threads - 1) // threads), threads=threads)
        offload.target(k.add_one, a, 10, min(n, 20), map=[offload.tofrom(a[10:20])],
                       device=device, teams=1, threads=threads)
    elapsed = time.perf_counter() - t0

    ok = np.array_equal(a, expect) and (pinned is None or not pinned.locked)
    info = None if initial else offload.devices()[device]
    where = f"device {device} ({info.plugin})" if info else "the initial device (host)"
    print(f"prelock on {where}: {n} ints, {elapsed * 1e3:.2f} ms"
          f"{'' if pinned is not None else ' (nothing pinned)'}")
    if info is not None:
        s = offload.stats(device)           # bytes by route: pinned ones went directly
        for way, arrow in (("to_device", "host->device"), ("from_device", "device->host")):
            r = s[way]
            print(f"  {arrow}: {r['pinned']} bytes pinned, "
                  f"{r['staged'] + r['pageable'] + r['host']} bytes unpinned")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
