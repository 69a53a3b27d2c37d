"""Lock benchmark (host plugin): offload's lock/unlock against raw mlock/munlock.

Prints a table of per-operation times and ratios to the raw syscalls taken in
the same run, and writes bench/lock.png.
"""
from __future__ import annotations

import os
import sys

import cffi
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "host")

import offload  # noqa: E402
from bench._util import arguments, machine, per_call, plot, table  # noqa: E402

ffi = cffi.FFI()
ffi.cdef("int mlock(const void *, size_t); int munlock(const void *, size_t);")
libc = ffi.dlopen(None)


def main() -> None:
    arguments(__doc__).parse_args()
    dev = offload.runtime.current().manager.get_device(0)
    rows, ours, raw = [], [], []

    # fast path: lock of a range inside an entry this device already uses
    big = np.ones(1 << 20, np.uint8)
    base = offload.lock(big, device=0)
    p = big.ctypes.data + 4096
    n = 10000

    def fast_lock():
        dev.lock(p, 4096)

    def give_back():
        for _ in range(dev.plugin.pinned.lookup(p).count[0] - 1):
            dev.unlock(p)

    t_fast = per_call(fast_lock, number=n)
    give_back()
    t_fast_api = per_call(lambda: offload.llvm_omp_target_lock_mem(p, 4096, 0), number=n)
    give_back()
    base.unlock()
    rows.append(("lock fast path (Device.lock)", f"{t_fast * 1e6:.2f} us", "-", "-"))
    rows.append(("lock fast path (llvm_omp_target_lock_mem)", f"{t_fast_api * 1e6:.2f} us",
                 "-", "-"))

    labels = []
    for size, label in ((4096, "4 KiB"), (1 << 20, "1 MiB"), (256 << 20, "256 MiB")):
        a = np.ones(size, np.uint8)          # touched, so both sides lock resident pages
        addr = a.ctypes.data
        cptr = ffi.cast("void *", addr)

        def raw_pair():
            libc.mlock(cptr, size)
            libc.munlock(cptr, size)

        def ours_pair():
            dev.lock(addr, size)
            dev.unlock(addr)

        reps = 5 if size > 1 << 24 else 7
        t_raw = per_call(raw_pair, repeat=reps)
        t_ours = per_call(ours_pair, repeat=reps)
        t_raw2 = per_call(raw_pair, repeat=reps)        # bracket ours: drift check
        t_raw = min(t_raw, t_raw2)
        rows.append((f"lock+unlock {label}", f"{t_ours * 1e6:.1f} us",
                     f"{t_raw * 1e6:.1f} us", f"{t_ours / t_raw:.2f}x"))
        labels.append(label)
        ours.append(t_ours * 1e6)
        raw.append(t_raw * 1e6)

    print(f"offload bench/lock.py on {machine()}")
    print(table(rows, ("operation", "offload", "raw mlock+munlock", "ratio")))
    print(plot(os.path.join(os.path.dirname(__file__), "lock.png"),
               f"lock+unlock against raw mlock+munlock ({machine()})", labels,
               {"offload": ours, "raw": raw}, "time per operation (µs, log scale)"))
    offload.shutdown()


if __name__ == "__main__":
    main()
