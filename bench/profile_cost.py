"""What LIBOMPTARGET_PROFILE's hooks cost when no profile is written (issue 31).

On the Python paths (OFFLOAD_ACCEL=0: the compiled core's paths have no hook at all),
each copy and launch reads one module global. Measured here against the same operations
with the hooked plugin-table methods replaced by their bodies (the hooks stripped), and,
for scale, with a profile being written. Rounds alternate; medians of five. Prints a
table and writes bench/profile_cost.png.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "host")
os.environ["OFFLOAD_ACCEL"] = "0"

import offload  # noqa: E402
from bench._util import arguments, machine, per_call, plot, table  # noqa: E402
from offload import profile  # noqa: E402
from offload.plugins.common import GenericDevice, GenericPlugin  # noqa: E402

HOOKED = {
    (GenericPlugin, "data_submit"):
        lambda self, d, tgt, host, size, queue=None: self._data_submit(d, tgt, host, size,
                                                                        queue),
    (GenericPlugin, "data_retrieve"):
        lambda self, d, host, tgt, size, queue=None: self._data_retrieve(d, host, tgt, size,
                                                                          queue),
    (GenericDevice, "launch"):
        lambda self, k, args, teams=None, threads=None, queue=None, shared_mem=0:
        self._launch_impl(k, args, teams, threads, queue, shared_mem),
}


def operations():
    k = offload.compile_c("void touch(int *a) { a[0] += 1; }\n")
    a = np.zeros(1000, np.int32)
    clause = [offload.tofrom(a)]
    return {
        "target map(tofrom) 1000 ints": lambda: offload.target(k.touch, a, map=clause,
                                                               device=0),
        "target update to+from 1000 ints": lambda: offload.target_update(to=[a], from_=[a],
                                                                         device=0),
    }, a


def measure(kind: str, trace_dir: str) -> dict[str, float]:
    saved = {key: getattr(*key) for key in HOOKED}
    try:
        if kind == "hooks stripped":
            for (cls, name), body in HOOKED.items():
                setattr(cls, name, body)
        if kind == "profiling":
            os.environ["LIBOMPTARGET_PROFILE"] = os.path.join(trace_dir, "p.json")
        ops, a = operations()
        with offload.target_data(offload.tofrom(a), device=0):   # update needs a mapping
            out = {name: per_call(fn) for name, fn in ops.items()
                   if "update" in name}
        out.update({name: per_call(fn) for name, fn in ops.items() if "update" not in name})
        return out
    finally:
        offload.shutdown()
        os.environ.pop("LIBOMPTARGET_PROFILE", None)
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)
        assert profile.active is None


def main() -> None:
    arguments(__doc__).parse_args()
    kinds = ("hooks stripped", "hooks, no profile", "profiling")
    runs: dict[str, dict[str, list[float]]] = {k: {} for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(5):
            for kind in kinds:
                for name, t in measure(kind, tmp).items():
                    runs[kind].setdefault(name, []).append(t)
    med = {k: {n: statistics.median(v) for n, v in r.items()} for k, r in runs.items()}
    rows = []
    for name in med["hooks stripped"]:
        base = med["hooks stripped"][name]
        rows.append((name, f"{base * 1e6:.2f} us",
                     f"{med['hooks, no profile'][name] * 1e6:.2f} us",
                     f"{med['hooks, no profile'][name] / base:.3f}x",
                     f"{med['profiling'][name] * 1e6:.2f} us",
                     f"{med['profiling'][name] / base:.2f}x"))
    print(f"offload bench/profile_cost.py on {machine()} (OFFLOAD_ACCEL=0, host plugin)")
    print(table(rows, ("operation", "hooks stripped", "hooks, no profile", "ratio",
                       "profiling", "ratio")))
    names = list(med["hooks stripped"])
    print(plot(os.path.join(os.path.dirname(__file__), "profile_cost.png"),
               f"Profile hooks' cost, host plugin ({machine()})", names,
               {k: [med[k][n] * 1e6 for n in names] for k in kinds},
               "time per operation (µs, log scale)"))


if __name__ == "__main__":
    main()
