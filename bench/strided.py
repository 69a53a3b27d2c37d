"""Strided target_update against the contiguous update of the same bytes.

A column block a[:, c0:c1] of a 2-D array whose rows are >= 4 KiB, updated from the
device (target_update(from_=[a[:, c0:c1]])), against target_update of a contiguous
array of the same size, in the same run, on the default device's plugin; both unpinned,
then both prelocked (llvm_omp_target_lock_mem).
Prints per-call times and the ratio (bytes per second of the strided update over the
contiguous one); writes bench/strided.png.
Usage: python bench/strided.py [rows] [row_KiB]
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import offload  # noqa: E402
from bench._util import arguments, machine, per_call, plot, table  # noqa: E402


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("rows", nargs="?", type=int, default=4096)
    parser.add_argument("row_kib", nargs="?", type=int, default=8)
    args = parser.parse_args()
    cols = args.row_kib * 1024 // 4
    a = np.zeros((args.rows, 2 * cols), dtype=np.float32)        # take half of each row
    block = a[:, cols // 2: cols // 2 + cols]
    flat = np.zeros(block.size, dtype=np.float32)
    dev = offload.omp_get_default_device()
    rows, vals = [], {}
    nbytes = flat.nbytes
    with offload.target_data(offload.to(a), offload.to(flat), device=dev):
        for locked in (False, True):
            if locked:
                offload.llvm_omp_target_lock_mem(a, a.nbytes, dev)
                offload.llvm_omp_target_lock_mem(flat, flat.nbytes, dev)
            tag = "prelocked" if locked else "unpinned"
            for _rep in range(3):                                # interleaved
                c = per_call(lambda: offload.target_update(from_=[flat], device=dev))
                s = per_call(lambda: offload.target_update(from_=[block], device=dev))
                vals.setdefault(f"contiguous {tag}", []).append(c)
                vals.setdefault(f"strided {tag}", []).append(s)
            c = float(np.median(vals[f"contiguous {tag}"]))
            s = float(np.median(vals[f"strided {tag}"]))
            rows.append((f"contiguous target_update, {tag}", f"{c * 1e6:9.1f} us",
                         f"{nbytes / c / 1e9:6.2f} GB/s", "1.00x"))
            rows.append((f"strided a[:, {cols // 2}:{cols // 2 + cols}] ({args.rows} rows of "
                         f"{args.row_kib} KiB), {tag}", f"{s * 1e6:9.1f} us",
                         f"{nbytes / s / 1e9:6.2f} GB/s", f"{c / s:.2f}x"))
        offload.llvm_omp_target_unlock_mem(a, dev)
        offload.llvm_omp_target_unlock_mem(flat, dev)
    gbs = {k: nbytes / float(np.median(v)) / 1e9 for k, v in vals.items()}
    name = offload.devices()[dev].name if offload.omp_get_num_devices() else "host"
    print(f"offload bench/strided.py, {nbytes >> 20} MiB, device {dev} ({name}), host "
          f"{machine()}")
    print(table(rows, ("update", "per call", "bandwidth", "ratio to contiguous")))
    print(plot(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "strided.png"),
               f"Strided vs contiguous target_update ({name})", list(gbs),
               {"GB/s": list(gbs.values())}, "GB/s"))


if __name__ == "__main__":
    main()
