"""Small timing helpers shared by the bench scripts."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time


def per_call(fn, repeat: int = 7, number: int = 0, budget: float = 0.2) -> float:
    """Median seconds per call of fn() over `repeat` batches (batch size auto-chosen)."""
    if not number:
        number = 1
        while True:
            t = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - t > budget / 10 or number > 1 << 20:
                break
            number *= 4
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return statistics.median(times)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def table(rows: list[tuple], headers: tuple) -> str:
    cols = list(zip(headers, *rows))
    widths = [max(len(str(c)) for c in col) for col in cols]
    out = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths))]
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
HATCHES = ["", "//", "..", "xx", "\\\\", "--", "++", "oo"]


def style(i: int) -> dict:
    """Colour and marker of series i: distinct for the first ten."""
    return {"color": COLOURS[i % len(COLOURS)], "marker": MARKERS[i % len(MARKERS)]}


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose --help prints the script's docstring."""
    return argparse.ArgumentParser(description=(doc or "").strip(),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def plot(path: str, title: str, xlabels: list[str], series: dict[str, list[float]],
         ylabel: str, xlabel: str = "") -> str:
    """A grouped bar chart as PNG (log scale, legend outside the bars); returns a note
    of what was written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "(matplotlib not installed: no plot written; pip install '.[bench]')"
    fig, ax = plt.subplots(figsize=(11, 1.5 + 0.25 * len(xlabels) * max(1, len(series))))
    height = 0.8 / max(1, len(series))
    for i, (name, vals) in enumerate(series.items()):
        ax.barh([y + i * height for y in range(len(xlabels))], vals, height, label=name,
                color=COLOURS[i % len(COLOURS)], hatch=HATCHES[i % len(HATCHES)],
                edgecolor="black", linewidth=0.5)
    ax.set_yticks([y + 0.4 - height / 2 for y in range(len(xlabels))], xlabels, fontsize=8)
    ax.invert_yaxis()                       # first row on top, as in the printed table
    ax.set_xlabel(ylabel)
    if xlabel:
        ax.set_ylabel(xlabel)
    ax.set_xscale("log")
    ax.set_title(title)
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"
