"""Throughput under threads (issue 29, item 4): T threads, each on arrays of its own, run a
mix of operations for a fixed time on device 0 — lock+unlock of a buffer, a data region
with a kernel inside, update(from)+update(to) of a mapped array, a kernel on mapped data,
and a `nowait` kernel waited for — and every result is checked at the end (each kernel
adds 1 to each element). Prints, per thread count, operations per second against the
one-thread rate measured in the same run (the ideal is T x), and the mean time of each
kind of operation, so where the time goes under contention shows; writes
bench/threads.png.

The kernel is CUDA C through NVRTC on a CUDA device, C through the host compiler on the
host plugin (OFFLOAD_PLUGINS=host).
Usage: python bench/threads.py [--threads 1,2,4,8,16] [--seconds 5] [--elements 1024]
       [--kinds 3]
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import offload  # noqa: E402
from bench._util import arguments, machine, plot, table  # noqa: E402

CUDA_SRC = ('extern "C" __global__ void inc(int *a, int n) {\n'
            '  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += 1; }\n')
C_SRC = "void inc(int *a, int n) { for (int i = 0; i < n; ++i) a[i] += 1; }\n"
KINDS = ("lock+unlock", "region+kernel", "update from+to", "kernel on mapped", "nowait kernel")


class Worker:
    """One thread's arrays, counts and the time each kind of operation took."""

    def __init__(self, kernel, n: int, geometry: dict, kinds: list[int]) -> None:
        self.k, self.n, self.geometry, self.kinds = kernel, n, geometry, kinds
        self.region = np.zeros(n, np.int32)       # mapped per region: +1 each
        self.mapped = np.zeros(n, np.int32)       # mapped throughout: kernels +1 each
        self.pinned = np.zeros(n, np.int32)
        self.expect_region = self.expect_mapped = 0
        self.count = [0] * len(KINDS)
        self.spent = [0.0] * len(KINDS)
        self.error: BaseException | None = None

    def run(self, deadline: list[float], start: threading.Barrier) -> None:
        k, n, g = self.k, self.n, self.geometry
        try:
            with offload.target_data(offload.tofrom(self.mapped), device=0):
                start.wait()                    # every thread mapped: the clock starts
                until = deadline[0]
                i = 0
                kinds = self.kinds
                while time.perf_counter() < until:
                    kind = kinds[i % len(kinds)]
                    t = time.perf_counter()
                    if kind == 0:
                        offload.llvm_omp_target_lock_mem(self.pinned, self.pinned.nbytes, 0)
                        offload.llvm_omp_target_unlock_mem(self.pinned, 0)
                    elif kind == 1:
                        with offload.target_data(offload.tofrom(self.region), device=0):
                            offload.target(k.inc, self.region, n, device=0, **g)
                        self.expect_region += 1
                    elif kind == 2:
                        offload.target_update(from_=[self.mapped], device=0)
                        offload.target_update(to=[self.mapped], device=0)
                    elif kind == 3:
                        offload.target(k.inc, self.mapped, n, device=0, **g)
                        self.expect_mapped += 1
                    else:
                        offload.target(k.inc, self.mapped, n, device=0, nowait=True,
                                       **g).wait()
                        self.expect_mapped += 1
                    self.spent[kind] += time.perf_counter() - t
                    self.count[kind] += 1
                    i += 1
            if not (self.region == self.expect_region).all():
                raise AssertionError(f"region array: {set(self.region.tolist())} "
                                     f"!= {self.expect_region}")
            if not (self.mapped == self.expect_mapped).all():
                raise AssertionError(f"mapped array: {set(self.mapped.tolist())} "
                                     f"!= {self.expect_mapped}")
        except BaseException as exc:       # noqa: BLE001 - reported by main
            self.error = exc
            try:
                start.abort()
            except threading.BrokenBarrierError:
                pass


def measure(kernel, threads: int, seconds: float, n: int, geometry: dict,
            kinds: list[int]) -> list[Worker]:
    """Run `threads` workers for `seconds` from the moment all of them are ready."""
    workers = [Worker(kernel, n, geometry, kinds) for _ in range(threads)]
    deadline = [0.0]
    start = threading.Barrier(threads + 1,     # the clock starts once every thread is ready
                              lambda: deadline.__setitem__(0, time.perf_counter() + seconds))
    ts = [threading.Thread(target=w.run, args=(deadline, start)) for w in workers]
    for t in ts:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass                                          # a worker failed: reported below
    for t in ts:
        t.join()
    for w in workers:
        if w.error is not None:
            raise w.error
    return workers


def main() -> None:
    p = arguments(__doc__)
    p.add_argument("--threads", default=None,
                   help="thread counts, comma-separated (default 1,2,4,... up to the cores, "
                        "at most 16)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--elements", type=int, default=1024)
    p.add_argument("--kinds", default=None,
                   help="the operations to mix, by number (0-4, in the table's order; "
                        "default all): one kind alone shows how it scales")
    a = p.parse_args()
    kinds = [int(x) for x in a.kinds.split(",")] if a.kinds else list(range(len(KINDS)))
    cores = min(os.cpu_count() or 1, 16)
    counts = [int(x) for x in a.threads.split(",")] if a.threads else \
        sorted({1, *[c for c in (2, 4, 8, 16) if c <= cores], cores})
    dev = offload.devices()[0]
    if dev.plugin == "cuda":
        kernel = offload.compile_cuda(CUDA_SRC)
        geometry = {"teams": (a.elements + 127) // 128, "threads": 128}
    else:
        kernel = offload.compile_c(C_SRC)
        geometry = {}
    rows, labels, rates, ideal = [], [], [], []
    base = None
    for t in counts:
        workers = measure(kernel, t, a.seconds, a.elements, geometry, kinds)
        ops = sum(sum(w.count) for w in workers)
        rate = ops / a.seconds
        base = rate if base is None else base
        per_kind = []
        for j in range(len(KINDS)):
            c = sum(w.count[j] for w in workers)
            s = sum(w.spent[j] for w in workers)
            per_kind.append(f"{s / c * 1e6:.0f}" if c else "-")
        rows.append((t, ops, f"{rate:,.0f}", f"{rate / base:.2f}x", f"{rate / base / t:.0%}",
                     *per_kind))
        labels.append(f"{t} thread{'s' if t > 1 else ''}")
        rates.append(rate / base)
        ideal.append(float(t))
    print(f"offload bench/threads.py, device 0: {dev.name} ({dev.plugin}), host {machine()}, "
          f"{a.seconds:g} s per count, {a.elements} ints per array, operations "
          f"{', '.join(KINDS[k] for k in kinds)}; all results right")
    print(table(rows, ("threads", "operations", "ops/s", "vs 1 thread", "per thread",
                       *(f"{k} us" for k in KINDS))))
    print(plot(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "threads.png"),
               "Operations per second under threads, against one thread (same run)",
               labels, {"offload": rates, "ideal (T x)": ideal}, "x the one-thread rate"))


if __name__ == "__main__":
    main()
