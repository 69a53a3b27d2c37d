"""Runtime overhead on the host plugin: empty region, map(tofrom), enter+exit, lookups.

Baselines, in the same run: LLVM 19's own libomptarget running the same operations in a
C program built by clang-19 (bench/llvm_overhead.c, with OMP_NUM_THREADS=1; needs
clang-19, clang-tools-19 and libomp-19-dev, else that column says why it is missing), and
numpy copies of the same bytes (a map(tofrom) moves them twice). The C program runs three
times, interleaved with three rounds of the empty region and of the map(tofrom) of 1,000
ints that adds 1 to each element (issue 29's measure); medians. Prints a table and writes
bench/overhead.png.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "host")

import offload  # noqa: E402
from bench._util import arguments, machine, per_call, plot, table  # noqa: E402

LLVM_LIB = "/usr/lib/llvm-19/lib"


def llvm_program() -> tuple[str | None, str]:
    """bench/llvm_overhead.c built for LLVM 19's libomptarget (a path in a directory that
    lives as long as the process), or (None, why not)."""
    clang = shutil.which("clang-19")
    if clang is None or not os.path.exists(os.path.join(LLVM_LIB, "libomptarget.so")):
        return None, "LLVM baseline skipped: needs clang-19, clang-tools-19, libomp-19-dev"
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llvm_overhead.c")
    exe = os.path.join(tempfile.mkdtemp(prefix="offload-bench-"), "llvm_overhead")
    r = subprocess.run([clang, "-O2", "-fopenmp", "-fopenmp-targets=x86_64-unknown-linux-gnu",
                        src, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        return None, f"LLVM baseline not built: {r.stderr.strip()[:300]}"
    return exe, "LLVM 19 libomptarget, OMP_NUM_THREADS=1"


def llvm_round(exe: str, runs: dict[str, list[float]]) -> None:
    """One run of the C program (OMP_NUM_THREADS=1), its seconds per operation added."""
    env = dict(os.environ, LD_LIBRARY_PATH=LLVM_LIB, OMP_NUM_THREADS="1")
    out = subprocess.run([exe], capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        name, _, value = line.rpartition(" ")
        runs.setdefault(name, []).append(float(value))


def main() -> None:
    arguments(__doc__).parse_args()
    exe, llvm_note = llvm_program()
    k = offload.compile_c("void nothing(void) {}\nvoid touch(int *a) { a[0] += 1; }\n"
                          "void add_one(int *a) { for (int i = 0; i < 1000; i++) a[i] += 1; }\n")
    dev = offload.runtime.current().manager.get_device(0)
    rows, labels, ours, base = [], [], [], []

    def add(name, t, t_base=None, base_name=""):
        ratio = f"{t / t_base:.2f}x" if t_base else "-"
        t_llvm = llvm.get(name)
        rows.append((name, f"{t * 1e6:.2f} us",
                     f"{t_llvm * 1e6:.2f} us" if t_llvm else "-",
                     f"{t / t_llvm:.2f}x" if t_llvm else "-",
                     f"{t_base * 1e6:.2f} us ({base_name})" if t_base else "-", ratio))
        labels.append(name)
        ours.append(t * 1e6)
        base.append((t_base or 0) * 1e6)

    # the two rows of issue 29's Python API goal, interleaved with the C program's runs:
    # median of three rounds each
    small = np.zeros(1000, np.int32)
    small_clause = [offload.tofrom(small)]
    llvm_runs: dict[str, list[float]] = {}
    mine: dict[str, list[float]] = {}
    for _ in range(3):
        if exe is not None:
            llvm_round(exe, llvm_runs)
        mine.setdefault("empty", []).append(
            per_call(lambda: offload.target(k.nothing, device=0)))
        mine.setdefault("map", []).append(
            per_call(lambda: offload.target(k.add_one, small, map=small_clause, device=0)))
    llvm = {name: statistics.median(v) for name, v in llvm_runs.items()}
    add("empty target region", statistics.median(mine["empty"]))
    for n in (1000, 1_000_000):
        a = np.zeros(n, np.int32)
        b = np.empty_like(a)

        def numpy_round_trip():
            np.copyto(b, a)
            np.copyto(a, b)

        clause = [offload.tofrom(a)]
        t = statistics.median(mine["map"]) if n == 1000 else \
            per_call(lambda: offload.target(k.touch, a, map=clause, device=0))
        add(f"target map(tofrom) {n} ints", t, per_call(numpy_round_trip), "2 numpy copies")
    a = np.zeros(1000, np.int32)
    b = np.empty_like(a)
    to, frm = offload.to(a), offload.from_(a)

    def enter_exit():
        offload.target_enter_data(to, device=0)
        offload.target_exit_data(frm, device=0)

    add("enter+exit 1000 ints", per_call(enter_exit),
        per_call(lambda: (np.copyto(b, a), np.copyto(a, b))), "2 numpy copies")
    with offload.target_data(offload.tofrom(a), device=0):   # the loop inside a data region
        add("target on mapped 1000 ints", per_call(lambda: offload.target(k.touch, a,
                                                                          device=0)))

    # lookup cost against the number of live mappings
    keep = []
    pool = np.zeros(200_000, np.int64)
    results = {}
    for live in (10, 100_000):
        while len(keep) < live:
            i = len(keep)
            keep.append(pool[2 * i:2 * i + 1])
            offload.target_enter_data(offload.alloc(keep[-1]), device=0)
        probe = keep[live // 2]
        addr = probe.ctypes.data
        results[live] = per_call(lambda: dev.table.lookup(addr, 8))
        add(f"lookup, {live} live mappings", results[live],
            results[10] if live != 10 else None, "10 live")
        inner = addr + 4                       # an interior address: the bisect path
        results[-live] = per_call(lambda: dev.table.lookup(inner, 4))
        add(f"lookup of an interior address, {live} live", results[-live],
            results[-10] if live != 10 else None, "10 live")
    print(f"offload bench/overhead.py on {machine()}; {llvm_note}")
    print(table(rows, ("operation", "offload", "LLVM 19", "ratio to LLVM", "other baseline",
                       "ratio")))
    print(plot(os.path.join(os.path.dirname(__file__), "overhead.png"),
               f"Per-operation cost, host plugin ({machine()})", labels, {"offload": ours,
                                                           "baseline (the table says which)": base}, "time per operation (µs, log scale)"))
    offload.shutdown()


if __name__ == "__main__":
    main()
