"""Transfer benchmark on a CUDA device: offload against raw driver copies.

One run, sizes 1 MiB to 2 GiB: raw driver pageable and pinned copies (the
baselines), offload target_update to/from of a present array (pure transfer),
enter/exit and target map(tofrom) round trips (allocation included), each
with the array prelocked, unlocked, and unlocked with
LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=on; PyTorch/CuPy/numba where importable.
Prints GB/s and ratios to the raw pinned copy; writes bench/transfers.png.
Usage: python bench/transfers.py [max_size_MiB]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["OFFLOAD_PLUGINS"] = "cuda"

import offload  # noqa: E402
from bench._util import arguments, machine, per_call, style, table  # noqa: E402

MiB = 1 << 20


def timed(fn, reps=5) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def restart(lock_mapped: str) -> None:
    offload.shutdown()
    os.environ["LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS"] = lock_mapped


def raw(size: int) -> dict:
    """Raw driver copies through the plugin's own cffi handle (no offload logic)."""
    from offload.plugins.cuda import _ffi
    dev = offload.runtime.current().manager.get_device(0).generic
    lib = dev.plugin.drv.lib
    dev.activate()
    q = dev.get_queue()
    d = offload.omp_target_alloc(size, 0)
    hp = _ffi.new("void **")
    assert lib.cuMemAllocHost_v2(hp, size) == 0
    pinned = hp[0]
    page = np.ones(size, np.uint8)
    pg = _ffi.cast("void *", page.ctypes.data)

    def h2d(src):
        return lambda: (lib.cuMemcpyHtoDAsync_v2(d, src, size, q), lib.cuStreamSynchronize(q))

    def d2h(dst):
        return lambda: (lib.cuMemcpyDtoHAsync_v2(dst, d, size, q), lib.cuStreamSynchronize(q))

    out = {"raw pinned H2D": timed(h2d(pinned)), "raw pinned D2H": timed(d2h(pinned)),
           "raw pageable H2D": timed(h2d(pg)), "raw pageable D2H": timed(d2h(pg))}
    lib.cuMemFreeHost(pinned)
    offload.omp_target_free(d, 0)
    dev.release_queue(q)
    return out


def ours(size: int, mode: str, kernel) -> dict:
    a = np.ones(size, np.uint8)
    pin = offload.lock(a, device=0) if mode == "prelocked" else None
    out = {}
    with offload.target_data(offload.alloc(a), device=0):
        out[f"update to ({mode})"] = timed(lambda: offload.target_update(to=[a], device=0))
        out[f"update from ({mode})"] = timed(lambda: offload.target_update(from_=[a], device=0))
    out[f"enter/exit tofrom ({mode})"] = timed(lambda: (
        offload.target_enter_data(offload.to(a), device=0),
        offload.target_exit_data(offload.from_(a), device=0)), reps=3) / 2
    out[f"target map(tofrom) ({mode})"] = timed(lambda: offload.target(
        kernel.nothing, map=[offload.tofrom(a)], device=0), reps=3) / 2
    if pin:
        pin.unlock()
    return out


def frameworks(size: int) -> dict:
    out = {}
    try:
        import torch
        a = torch.ones(size, dtype=torch.uint8)
        p = a.pin_memory()
        g = torch.empty(size, dtype=torch.uint8, device="cuda")
        out["torch pageable H2D"] = timed(lambda: (g.copy_(a), torch.cuda.synchronize()))
        out["torch pinned H2D"] = timed(lambda: (g.copy_(p, non_blocking=True),
                                                 torch.cuda.synchronize()))
        out["torch pinned D2H"] = timed(lambda: (p.copy_(g, non_blocking=True),
                                                 torch.cuda.synchronize()))
    except Exception as exc:     # noqa: BLE001 - optional baseline
        out["torch"] = repr(exc)
    try:
        import cupy
        a = np.ones(size, np.uint8)
        g = cupy.empty(size, cupy.uint8)
        out["cupy pageable H2D"] = timed(lambda: (g.set(a), cupy.cuda.Device().synchronize()))
    except Exception as exc:     # noqa: BLE001
        out["cupy"] = repr(exc)
    try:
        from numba import cuda as ncuda
        a = np.ones(size, np.uint8)
        g = ncuda.device_array(size, np.uint8)
        out["numba pageable H2D"] = timed(lambda: (g.copy_to_device(a), ncuda.synchronize()))
    except Exception as exc:     # noqa: BLE001
        out["numba"] = repr(exc)
    return out


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("max_mib", nargs="?", type=int, default=2048,
                        help="largest transfer in MiB (default 2048)")
    max_mib = parser.parse_args().max_mib
    sizes = [s for s in (1, 16, 256, 1024, 2048) if s <= max_mib]
    results: dict[int, dict] = {}
    kernel = offload.compile_cuda('extern "C" __global__ void nothing() {}')
    for mode, env in (("prelocked", "off"), ("unlocked", "off"), ("lock-mapped", "on")):
        restart(env)
        for s in sizes:
            results.setdefault(s, {})
            if mode == "prelocked":
                results[s].update(raw(s * MiB))
                results[s].update(frameworks(s * MiB))
            results[s].update(ours(s * MiB, mode, kernel))
    restart("off")
    dev = offload.runtime.current().manager.get_device(0)
    a = np.ones(MiB, np.uint8)
    pin = offload.lock(a, device=0)
    fast = per_call(lambda: (dev.lock(a.ctypes.data + 64, 64), dev.unlock(a.ctypes.data + 64)))
    fast_lock = per_call(lambda: dev.lock(a.ctypes.data + 64, 64), number=20000)
    for _ in range(dev.plugin.pinned.lookup(a.ctypes.data).count[0] - 1):
        dev.unlock(a.ctypes.data + 64)
    pin.unlock()

    info = dev.info()
    dev_name = f"{info['name']}, {info['architecture']}"
    print(f"offload bench/transfers.py on {info['name']} ({info['architecture']}), host "
          f"{machine()}, {time.strftime('%Y-%m-%d')}")
    names = [k for k in results[sizes[0]] if isinstance(results[sizes[0]][k], float)]
    rows = []
    for name in names:
        row = [name]
        for s in sizes:
            t = results[s][name]
            gbs = s * MiB / t / 1e9
            ref = "raw pinned D2H" if ("D2H" in name or "from" in name) else "raw pinned H2D"
            ratio = (s * MiB / results[s][ref] / 1e9) and gbs / (s * MiB / results[s][ref] / 1e9)
            row.append(f"{gbs:6.1f} ({ratio:.2f}x)")
        rows.append(tuple(row))
    print(table(rows, ("GB/s (ratio to raw pinned)", *[f"{s} MiB" for s in sizes])))
    print(f"lock of an already pinned range: {fast_lock * 1e6:.2f} us "
          f"(lock+unlock pair {fast * 1e6:.2f} us)")
    for s in sizes:
        for k, v in results[s].items():
            if isinstance(v, str):
                print(f"  {k}: not measured ({v})")
        break
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), sharey=True)
        mode_colour = {"prelocked": "#1f77b4", "unlocked": "#ff7f0e", "lock-mapped": "#2ca02c"}
        op_style = {"update to": ("-", "o"), "update from": ("--", "s"),
                    "enter/exit tofrom": (":", "^"), "target map(tofrom)": ("-.", "D")}
        baselines = [n for n in names if "(" not in n]
        for i, name in enumerate(baselines):
            axes[0].plot(sizes, [s * MiB / results[s][name] / 1e9 for s in sizes],
                         label=name, **style(i))
        for name in names:
            if "(" not in name:
                continue
            op, mode = name[:-1].split(" (")
            ls, marker = op_style.get(op, ("-", "x"))
            axes[1].plot(sizes, [s * MiB / results[s][name] / 1e9 for s in sizes],
                         label=name, color=mode_colour.get(mode, "black"), linestyle=ls,
                         marker=marker)
        for ref, ls in (("raw pinned H2D", "-"), ("raw pageable H2D", "-")):
            axes[1].plot(sizes, [s * MiB / results[s][ref] / 1e9 for s in sizes], color="grey",
                         linewidth=3, alpha=0.35, linestyle=ls, label=f"{ref} (reference)")
        for ax, title in zip(axes, ("Baselines: raw driver copies and frameworks",
                                    "offload (colour: how the array is pinned)"), strict=True):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("transfer size (MiB)")
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=7, ncol=2)
        axes[0].set_ylabel("bandwidth (GB/s)")
        fig.suptitle(f"Host-device copies on device 0 ({dev_name})")
        fig.tight_layout()
        path = os.environ.get("OUT", os.path.dirname(__file__))
        fig.savefig(os.path.join(path, "transfers.png"), dpi=120)
        print(f"plot written to {os.path.join(path, 'transfers.png')}")
    except ImportError:
        print("(matplotlib not installed: no plot)")
    offload.shutdown()


if __name__ == "__main__":
    main()
