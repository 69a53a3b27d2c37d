"""`python -m offload.capi --libdir`: print the directory of offload's libomptarget.so.19.1
(building it on first use)."""
from __future__ import annotations

import argparse
import sys

from ..errors import OffloadError
from .build import libdir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m offload.capi",
        description="offload's drop-in libomptarget.so.19.1 for clang-19 OpenMP programs: "
                    "LD_LIBRARY_PATH=$(python -m offload.capi --libdir) ./prog")
    parser.add_argument("--libdir", action="store_true",
                        help="print the directory holding libomptarget.so.19.1")
    args = parser.parse_args(argv)
    if not args.libdir:
        parser.print_help()
        return 2
    try:
        print(libdir())
    except OffloadError as exc:
        print(f"offload.capi: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
