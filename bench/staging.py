"""Tune the CUDA plugin's staging of unpinned memory: chunk size x lanes.

Measures target_update to/from of an unlocked present array for each setting
against the raw pageable copy of the same run.
Usage: python bench/staging.py [chunk_MiB:lanes ...]
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["OFFLOAD_PLUGINS"] = "cuda"

import offload  # noqa: E402
from bench._util import arguments, table  # noqa: E402
from bench.transfers import MiB, raw, timed  # noqa: E402
from offload.plugins.cuda import CUDAPlugin  # noqa: E402


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("settings", nargs="*", metavar="CHUNK_MIB:LANES",
                        help="staging settings to try (default: 2,4,8 MiB x 8,16 lanes)")
    args = parser.parse_args()
    sizes = [16, 64, 256, 1024]
    rows = []
    base = {s: raw(s * MiB) for s in sizes}
    rows.append(("raw pageable H2D/D2H", *[
        f"{s * MiB / base[s]['raw pageable H2D'] / 1e9:5.1f}/"
        f"{s * MiB / base[s]['raw pageable D2H'] / 1e9:5.1f}" for s in sizes]))
    settings = [tuple(int(x) for x in arg.split(":")) for arg in args.settings] or \
        [(c, n) for c in (2, 4, 8) for n in (8, 16)]
    for chunk, lanes in settings:
        offload.shutdown()
        CUDAPlugin.staging_chunk = chunk * MiB
        CUDAPlugin.staging_lanes = lanes
        cells = []
        for s in sizes:
            a = np.ones(s * MiB, np.uint8)
            with offload.target_data(offload.alloc(a), device=0):
                t_to = timed(lambda: offload.target_update(to=[a], device=0))
                t_from = timed(lambda: offload.target_update(from_=[a], device=0))
            cells.append(f"{s * MiB / t_to / 1e9:5.1f}/{s * MiB / t_from / 1e9:5.1f}")
        rows.append((f"chunk {chunk} MiB, {lanes} lanes", *cells))
    print(table(rows, ("GB/s to/from (unlocked)", *[f"{s} MiB" for s in sizes])))
    offload.shutdown()


if __name__ == "__main__":
    main()
