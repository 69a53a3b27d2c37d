"""Device-to-device copies between two CUDA GPUs: offload against the raw driver copy.

Baselines taken in the same run: cuMemcpyPeerAsync before any peer access is enabled
(the driver bounces through the host), and PyTorch's tensor.to('cuda:1') where
importable. Then offload's omp_target_memcpy between the devices (which enables peer
access once per pair, as LLVM does). Prints GB/s and ratios; writes bench/peer.png.
Usage: python bench/peer.py [size_MiB]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "cuda")

import offload  # noqa: E402
from bench._util import arguments, machine, plot, table  # noqa: E402


def timed(fn, repeat: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("size_mib", nargs="?", type=int, default=1024)
    size = parser.parse_args().size_mib << 20
    m = offload.runtime.current().manager
    if m.num_devices() < 2:
        print(f"needs two CUDA devices, found {m.num_devices()}")
        return
    d0, d1 = m.get_device(0), m.get_device(1)
    g0, g1 = d0.generic, d1.generic
    a = offload.omp_target_alloc(size, 0)
    b = offload.omp_target_alloc(size, 1)
    drv = g0.plugin.drv
    rows, vals = [], {}

    def raw() -> None:                    # before offload enables peer access
        g0.activate()
        q = g0.get_queue()
        drv.check(drv.lib.cuMemcpyPeerAsync(b, g1.context, a, g0.context, size, q), "peer")
        g0._sync_impl(q)
        g0.release_queue(q)

    vals["raw cuMemcpyPeer (no peer access)"] = size / timed(raw) / 1e9
    init = offload.omp_get_initial_device()

    def ours() -> None:
        assert offload.omp_target_memcpy(b, a, size, 0, 0, 1, 0) == 0

    vals["offload omp_target_memcpy (peer access)"] = size / timed(ours) / 1e9
    try:
        import torch
        x = torch.empty(size, dtype=torch.uint8, device="cuda:0")
        vals["torch .to('cuda:1')"] = size / timed(
            lambda: (x.to("cuda:1"), torch.cuda.synchronize(1))) / 1e9
    except Exception as exc:              # noqa: BLE001 - a missing baseline is reported
        print(f"(torch baseline not measured: {exc})")
    check = np.arange(1 << 20, dtype=np.uint8)
    offload.omp_target_memcpy(a, check, check.nbytes, 0, 0, 0, init)
    ours()
    out = np.zeros_like(check)
    offload.omp_target_memcpy(out, b, out.nbytes, 0, 0, init, 1)
    assert (out == check).all(), "peer copy returned wrong data"
    base = vals["raw cuMemcpyPeer (no peer access)"]
    for name, v in vals.items():
        rows.append((name, f"{v:7.1f} GB/s", f"{v / base:5.2f}x"))
    print(f"offload bench/peer.py, {size >> 20} MiB, {d0.info()['name']} x2, host {machine()}")
    print(table(rows, ("copy", "bandwidth", "ratio to the raw copy")))
    print(plot(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "peer.png"),
               f"GPU-to-GPU copies, {size >> 20} MiB ({d0.info()['name']} x2)",
               list(vals), {"GB/s": list(vals.values())}, "bandwidth (GB/s, log scale)"))
    offload.omp_target_free(a, 0)
    offload.omp_target_free(b, 1)
    offload.shutdown()


if __name__ == "__main__":
    main()
