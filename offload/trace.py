"""Read a LIBOMPTARGET_PROFILE file: `python -m offload.trace summary FILE [--png OUT]`
prints the time and GB/s of the copies by route and the time of each kernel, from the
events on the device lanes, and with --png draws the timeline (one lane per device
queue; matplotlib, the `bench` extra)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from .errors import ErrorCode, OffloadError


@dataclass
class Row:
    """What the events of one route or kernel add up to."""

    count: int = 0
    bytes: int = 0
    us: float = 0.0
    names: set[str] = field(default_factory=set)

    @property
    def gbps(self) -> float:
        return self.bytes / (self.us * 1e3) if self.us > 0 else 0.0


@dataclass
class Summary:
    routes: dict[str, Row]
    kernels: dict[str, Row]
    lanes: dict[int, str]
    span_us: float


def load(path: str) -> dict[str, Any]:
    """The trace in `path`, checked to be Chrome trace-event JSON as the profile writes
    it (INVALID_VALUE naming what is wrong)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise OffloadError(ErrorCode.INVALID_VALUE, f"{path}: not a readable JSON "
                           f"trace: {exc}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise OffloadError(ErrorCode.INVALID_VALUE, f"{path}: no traceEvents list")
    for i, e in enumerate(events):
        missing = [k for k in ("ph", "ts", "pid", "tid", "name") if k not in e] + \
            (["dur"] if e.get("ph") == "X" and "dur" not in e else [])
        if missing:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"{path}: event {i} ({e.get('name')!r}) lacks "
                               f"{', '.join(missing)}")
    return data


def summarize(data: dict[str, Any]) -> Summary:
    """Add up the device lanes' events of a loaded trace."""
    routes: dict[str, Row] = {}
    kernels: dict[str, Row] = {}
    lanes: dict[int, str] = {}
    lo, hi = float("inf"), 0.0
    for e in data["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name" and e.get("cat") == "":
            lanes[e["tid"]] = e["args"]["name"]
        if e["ph"] != "X" or e.get("cat") != "device":
            continue
        a = e.get("args", {})
        lo, hi = min(lo, e["ts"]), max(hi, e["ts"] + e["dur"])
        if "kernel" in a:
            row = kernels.setdefault(a["kernel"], Row())
        else:
            row = routes.setdefault(a.get("route", "none"), Row())
            row.bytes += int(a.get("bytes", 0))
        row.count += 1
        row.us += e["dur"]
        row.names.add(e["name"])
    lanes = {t: n for t, n in lanes.items() if " queue " in n}
    return Summary(routes, kernels, lanes, hi - lo if hi else 0.0)


def format_summary(s: Summary) -> str:
    out = [f"{'copies by route':<24}{'count':>8}{'MiB':>12}{'ms':>12}{'GB/s':>10}"]
    for route, r in sorted(s.routes.items()):
        out.append(f"{route:<24}{r.count:>8}{r.bytes / 2**20:>12.3f}{r.us / 1e3:>12.3f}"
                   f"{r.gbps:>10.2f}")
    out.append("")
    out.append(f"{'kernel':<40}{'launches':>10}{'ms':>12}{'mean us':>12}")
    for name, r in sorted(s.kernels.items(), key=lambda kv: -kv[1].us):
        shown = name if len(name) <= 39 else name[:36] + "..."
        out.append(f"{shown:<40}{r.count:>10}{r.us / 1e3:>12.3f}{r.us / r.count:>12.1f}")
    out.append("")
    out.append(f"{len(s.lanes)} device queue lane(s), {s.span_us / 1e3:.3f} ms from the "
               f"first device event to the last")
    return "\n".join(out)


def draw(data: dict[str, Any], s: Summary, out: str) -> None:
    """The timeline: one lane per device queue, copies and kernels as bars."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise OffloadError(ErrorCode.UNSUPPORTED, "--png needs matplotlib (pip install "
                           "'offload[bench]')") from None
    order = sorted(s.lanes)
    row_of = {t: i for i, t in enumerate(order)}
    colors = {"HostToDev": "tab:blue", "DevToHost": "tab:orange", "DevToDev": "tab:purple",
              "Kernel Target": "tab:green"}
    events = [e for e in data["traceEvents"] if e["ph"] == "X" and e.get("cat") == "device"]
    t0 = min((e["ts"] for e in events), default=0.0)
    fig, ax = plt.subplots(figsize=(11, 2.0 + 0.6 * max(1, len(order))))
    for e in events:
        y = row_of.get(e["tid"])
        if y is None:
            continue
        ax.broken_barh([((e["ts"] - t0) / 1e3, max(e["dur"] / 1e3, 1e-4))], (y - 0.4, 0.8),
                       color=colors.get(e["name"], "tab:gray"))
    ax.set_yticks(range(len(order)), [s.lanes[t] for t in order])
    ax.set_xlabel("time since the first device event (ms)")
    ax.set_title("offload: copies and kernels per device queue")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, ["host to device", "device to host", "device to device", "kernel"],
              loc="lower center", bbox_to_anchor=(0.5, 1.12), ncol=4, fontsize="small",
              frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offload.trace",
                                     description="Summarize a LIBOMPTARGET_PROFILE file.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("summary", help="copies by route and kernels, in a table")
    p.add_argument("file")
    p.add_argument("--png", metavar="OUT", help="also draw the timeline into OUT")
    args = parser.parse_args(argv)
    try:
        data = load(args.file)
        s = summarize(data)
        print(format_summary(s))
        if args.png:
            draw(data, s, args.png)
            print(f"timeline: {args.png}")
    except OffloadError as exc:
        print(f"offload.trace: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
