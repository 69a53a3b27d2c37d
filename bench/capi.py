"""offload's drop-in libomptarget.so.19.1 against LLVM 19's own, running the same
clang-19 binaries in the same run (issue 13).

bench/llvm_overhead.c (empty target, map(tofrom) of 1,000 and 10^6 ints, enter+exit,
update, lock+unlock; median of 7 batches each) runs three times under each runtime,
alternately; the medians are compared. Process start: a program with one empty target
region, run 5 times under each. Prints a table of ratios; writes bench/capi.png.
Needs clang-19, clang-tools-19 and libomp-19-dev.
Usage: python bench/capi.py
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._util import arguments, machine, plot, table  # noqa: E402
from offload.capi import libdir  # noqa: E402

LLVM_LIB = "/usr/lib/llvm-19/lib"
HERE = os.path.dirname(os.path.abspath(__file__))
START = "int main(void) {\n#pragma omp target\n  { }\n  return 0;\n}\n"


def main() -> None:
    arguments(__doc__).parse_args()
    clang = shutil.which("clang-19")
    if clang is None or not os.path.exists(os.path.join(LLVM_LIB, "libomptarget.so.19.1")):
        sys.exit("bench/capi.py needs clang-19, clang-tools-19 and libomp-19-dev")
    ours = libdir()
    libs = {"LLVM 19": LLVM_LIB, "offload": f"{ours}:{LLVM_LIB}"}
    flags = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-unknown-linux-gnu"]
    with tempfile.TemporaryDirectory() as tmp:
        exe, start = os.path.join(tmp, "overhead"), os.path.join(tmp, "start")
        subprocess.run([clang, *flags, os.path.join(HERE, "llvm_overhead.c"), "-o", exe],
                       check=True)
        with open(start + ".c", "w") as f:
            f.write(START)
        subprocess.run([clang, *flags, start + ".c", "-o", start], check=True)
        runs: dict[str, dict[str, list[float]]] = {k: {} for k in libs}
        for _ in range(3):                                    # interleaved
            for who, path in libs.items():
                out = subprocess.run([exe], capture_output=True, text=True, check=True,
                                     env=dict(os.environ, LD_LIBRARY_PATH=path)).stdout
                for line in out.splitlines():
                    name, _, value = line.rpartition(" ")
                    runs[who].setdefault(name, []).append(float(value))
        for _ in range(5):
            for who, path in libs.items():
                t = time.perf_counter()
                subprocess.run([start], check=True, env=dict(os.environ, LD_LIBRARY_PATH=path))
                runs[who].setdefault("process start (one empty target)", []).append(
                    time.perf_counter() - t)
    med = {who: {k: statistics.median(v) for k, v in r.items()} for who, r in runs.items()}
    names = list(med["LLVM 19"])
    rows = []
    for n in names:
        o, ll = med["offload"][n], med["LLVM 19"][n]
        unit, scale = ("ms", 1e3) if n.startswith("process") else ("us", 1e6)
        extra = f" (+{(o - ll) * 1e3:.0f} ms)" if n.startswith("process") else ""
        rows.append((n, f"{o * scale:.2f} {unit}", f"{ll * scale:.2f} {unit}",
                     f"{o / ll:.2f}x{extra}"))
    print(f"offload bench/capi.py: the same clang-19 binaries on offload's libomptarget.so.19.1 "
          f"and on LLVM 19's; host {machine()}")
    print(table(rows, ("operation", "offload", "LLVM 19", "ratio")))
    print(plot(os.path.join(os.environ.get("OUT", HERE), "capi.png"),
               "Drop-in libomptarget: offload / LLVM 19 (same binaries)", names,
               {"ratio": [med["offload"][n] / med["LLVM 19"][n] for n in names]}, "x LLVM 19"))


if __name__ == "__main__":
    main()
