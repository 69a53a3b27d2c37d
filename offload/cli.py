"""offload-info: every plugin, whether it loaded and why not, every device."""
from __future__ import annotations

import argparse
import sys

from . import _accel, dlpack
from . import config as _config
from .plugin_manager import discover
from .runtime import current as _current


def main(argv: list[str] | None = None) -> int:
    """Print each plugin, its devices and their properties (like llvm-omp-device-info)."""
    parser = argparse.ArgumentParser(
        prog="offload-info",
        description="List offload's plugins, why a plugin has no devices, and every device "
                    "with its properties. Device numbers are those of offload.devices(); "
                    "the initial device (the host) is the last number.")
    parser.add_argument("--stats", metavar="FILE",
                        help="print the counters a program wrote with OFFLOAD_STATS=FILE")
    args = parser.parse_args(argv)
    if args.stats:
        import json

        from .statistics import format_stats
        try:
            with open(args.stats) as f:
                data = json.load(f)
            print(format_stats(data))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"offload-info: {args.stats}: not a file OFFLOAD_STATS wrote "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr)
            return 1
        return 0
    from . import __version__
    m = _current().manager
    print(f"offload {__version__}: {m.num_devices()} device(s); "
          f"initial device is {m.num_devices()}")
    print(f"mapping core: {_accel.describe(_config.read())}")
    print(f"DLPack deleters: {dlpack.describe_entries()}")
    number = 0
    for rec in m.records:
        status = (f"{rec.num_devices} device(s)" if rec.num_devices
                  else f"no devices: {rec.reason or 'none reported'}")
        print(f"\nplugin {rec.name}: {status}")
        for local in range(rec.num_devices):
            dev = m.get_device(number)
            print(f"  device {number} ({rec.name} #{local}):")
            for key, value in dev.info().items():
                print(f"    {key:<24} {value}")
            number += 1
    # the runtime scans entry points only when it needs one; offload-info always says
    for clash in m.clashes or discover()[1]:
        print(f"\nwarning: {clash}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
