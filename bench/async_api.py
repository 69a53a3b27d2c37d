"""Asynchronous device API on a CUDA GPU (issue 14), each against a baseline in the same run.

1. A three-stage pipeline over 1 GiB in 64 MiB chunks: H2D, kernel, D2H on three
   offload Streams linked by depend= (events on the device), against the same pipeline
   written with raw CUDA streams and events through CuPy (same pinned buffer, same
   kernel source), and against its slowest stage alone (one 1 GiB H2D).
2. One H2D and one D2H of 1 GiB prelocked at once (two Streams, nowait) against one
   direction alone, and the same two raw copies (CuPy, two streams) against one raw copy:
   the hardware's own ratio, measured in the same run.
3. omp_target_memset of 1 GiB against cudaMemsetAsync (CuPy) of the same bytes.
Runs are interleaved; medians of 5. Prints a table; writes bench/async_api.png.
Usage: python bench/async_api.py [MiB] [chunk_MiB]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "cuda")

import offload  # noqa: E402
from bench._util import arguments, machine, plot, table  # noqa: E402

SOURCE = r'''
extern "C" __global__ void add_one(float *a, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) a[i] += 1.0f;
}
'''


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("mib", nargs="?", type=int, default=1024)
    parser.add_argument("chunk_mib", nargs="?", type=int, default=64)
    args = parser.parse_args()
    import cupy
    nbytes, chunk = args.mib << 20, args.chunk_mib << 20
    a = np.zeros(nbytes // 4, dtype=np.float32)
    b = np.zeros(nbytes // 4, dtype=np.float32)
    for arr in (a, b):
        offload.llvm_omp_target_lock_mem(arr, arr.nbytes, 0)
    parts = np.split(a, nbytes // chunk)
    per = chunk // 4
    k = offload.compile_cuda(SOURCE)
    raw_k = cupy.RawKernel(SOURCE, "add_one")
    dev_a = cupy.empty(nbytes // 4, dtype=cupy.float32)
    dev_b = cupy.empty(nbytes // 4, dtype=cupy.float32)
    rt = cupy.cuda.runtime
    s = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
    qs = [offload.stream(0) for _ in range(3)]
    host = a.ctypes.data

    def ours() -> None:
        for p in parts:
            h1 = offload.target_update(to=[p], device=0, stream=qs[0], nowait=True)
            h2 = offload.target(k.add_one, p, p.size, device=0, stream=qs[1], nowait=True,
                                depend=[h1], teams=p.size // 256, threads=256)
            offload.target_update(from_=[p], device=0, stream=qs[2], nowait=True,
                                  depend=[h2])
        offload.taskwait()

    def raw() -> None:
        for i in range(len(parts)):
            off = i * chunk
            rt.memcpyAsync(dev_a.data.ptr + off, host + off, chunk, 1, s[0].ptr)
            e1 = cupy.cuda.Event(block=False, disable_timing=True)
            e1.record(s[0])
            s[1].wait_event(e1)
            with s[1]:
                raw_k((per // 256,), (256,), (dev_a[i * per:(i + 1) * per], np.int64(per)))
            e2 = cupy.cuda.Event(block=False, disable_timing=True)
            e2.record(s[1])
            s[2].wait_event(e2)
            rt.memcpyAsync(host + off, dev_a.data.ptr + off, chunk, 2, s[2].ptr)
        s[2].synchronize()

    def slowest_stage() -> None:
        rt.memcpyAsync(dev_a.data.ptr, host, nbytes, 1, s[0].ptr)
        s[0].synchronize()

    vals: dict[str, list[float]] = {}
    with offload.target_data(offload.alloc(a), offload.alloc(b), device=0):
        def one_way() -> None:
            offload.target_update(to=[a], device=0, stream=qs[0], nowait=True)
            offload.taskwait()

        def both_ways() -> None:
            offload.target_update(to=[a], device=0, stream=qs[0], nowait=True)
            offload.target_update(from_=[b], device=0, stream=qs[1], nowait=True)
            offload.taskwait()

        d = offload.omp_get_mapped_ptr(b, 0)

        def memset() -> None:
            offload.omp_target_memset(d, 7, nbytes, 0)

        def raw_one_way() -> None:
            rt.memcpyAsync(dev_a.data.ptr, host, nbytes, 4, s[0].ptr)   # cudaMemcpyDefault
            s[0].synchronize()

        def raw_both_ways() -> None:
            rt.memcpyAsync(dev_a.data.ptr, host, nbytes, 4, s[0].ptr)
            rt.memcpyAsync(b.ctypes.data, dev_b.data.ptr, nbytes, 4, s[1].ptr)
            s[0].synchronize()
            s[1].synchronize()

        def raw_memset() -> None:
            rt.memsetAsync(dev_a.data.ptr, 7, nbytes, s[0].ptr)
            s[0].synchronize()

        runs = {"pipeline, offload Streams": ours, "pipeline, raw CUDA streams (CuPy)": raw,
                "slowest stage alone (1 H2D)": slowest_stage, "one direction (H2D)": one_way,
                "both directions at once": both_ways,
                "raw one direction (H2D, CuPy)": raw_one_way,
                "raw both directions at once (CuPy)": raw_both_ways,
                "omp_target_memset": memset,
                "cudaMemsetAsync (CuPy)": raw_memset}
        for fn in runs.values():
            fn()                                                   # warm
        a[:] = 0
        ours()
        assert (a == 1).all(), "the pipeline did not add one to every element"
        for _ in range(5):
            for name, fn in runs.items():
                vals.setdefault(name, []).append(timed(fn))
    med = {n: statistics.median(v) for n, v in vals.items()}
    gbs = {n: (2 * nbytes if "both" in n else nbytes) / t / 1e9
           for n, t in med.items()}
    base = {"pipeline, offload Streams": "pipeline, raw CUDA streams (CuPy)",
            "pipeline, raw CUDA streams (CuPy)": "slowest stage alone (1 H2D)",
            "both directions at once": "one direction (H2D)",
            "raw both directions at once (CuPy)": "raw one direction (H2D, CuPy)",
            "omp_target_memset": "cudaMemsetAsync (CuPy)"}
    rows = []
    for n in runs:
        ratio = f"{gbs[n] / gbs[base[n]]:.2f}x of {base[n]}" if n in base else "baseline"
        rows.append((n, f"{med[n] * 1e3:8.2f} ms", f"{gbs[n]:8.1f} GB/s", ratio))
    name = offload.devices()[0].name
    print(f"offload bench/async_api.py, {args.mib} MiB in {args.chunk_mib} MiB chunks, "
          f"{name}, host {machine()}")
    print(table(rows, ("run", "time", "bytes/s", "ratio")))
    print(plot(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "async_api.png"),
               f"Asynchronous device API ({name})", list(gbs),
               {"GB/s": list(gbs.values())}, "GB/s"))
    for q in qs:
        q.close()
    for arr in (a, b):
        offload.llvm_omp_target_unlock_mem(arr, 0)


if __name__ == "__main__":
    main()
