"""Small timing helpers shared by the bench scripts."""
from __future__ import annotations

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


def plot(path: str, title: str, xlabels: list[str], series: dict[str, list[float]],
         ylabel: str) -> str:
    """A grouped bar chart as PNG; returns a note of what was written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "(matplotlib not installed: no plot written; pip install matplotlib)"
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(series))
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(xlabels))], vals, width, label=name)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(xlabels))], xlabels)
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return f"plot written to {path}"
