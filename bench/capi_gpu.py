"""offload's drop-in libomptarget on a CUDA GPU (issue 18): bench/capi_gpu.c, built for
nvptx by clang-19, run on offload's libomptarget.so.19.1, against raw driver copies of
the same size and a raw cuLaunchKernel+synchronize of an empty kernel, in the same run.

`--build DIR` (on a machine with clang-19 and the CUDA toolkit) builds DIR/capi_gpu;
`python bench/capi_gpu.py DIR/capi_gpu [MiB]` (on the GPU machine, libomp.so.5 beside the
binary) runs it. Prints GB/s and ratios; writes bench/capi_gpu.png.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "cuda")

from bench._util import arguments, machine, plot, table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    cuda = next((p for p in ("/usr/local/cuda-13.0", "/usr/local/cuda") if os.path.isdir(p)),
                "/usr/local/cuda")
    env = dict(os.environ, LIBRARY_PATH="/usr/lib/llvm-19/lib")
    subprocess.run(["clang-19", "-O2", "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda",
                    "--offload-arch=sm_90", f"--cuda-path={cuda}",
                    os.path.join(HERE, "capi_gpu.c"), "-o", os.path.join(out_dir, "capi_gpu")],
                   check=True, env=env)


def raw(size: int) -> dict[str, float]:
    """Seconds of raw driver copies (pinned and pageable) and of an empty kernel's
    launch+synchronize, through the CUDA plugin's own cffi handle."""
    import numpy as np

    import offload
    from bench.transfers import raw as raw_copies
    out = raw_copies(size)
    k = offload.compile_cuda('extern "C" __global__ void empty(int *a) {}')
    dev = offload.runtime.current().manager.get_device(0).generic
    kern = dev.kernel(k.binaries[0], "empty")
    from offload.plugins.cuda import _ffi
    lib = dev.plugin.drv.lib
    fn = kern.handle[0]
    d = offload.omp_target_alloc(4096, 0)
    arg = _ffi.new("unsigned long long *", d)
    params = _ffi.new("void *[]", [arg])
    q = dev.get_queue()

    def launch() -> None:
        lib.cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, q, params, _ffi.NULL)
        lib.cuStreamSynchronize(q)
    for _ in range(200):
        launch()
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(2000):
            launch()
        ts.append((time.perf_counter() - t) / 2000)
    out["raw cuLaunchKernel+sync, empty kernel"] = statistics.median(ts)
    dev.release_queue(q)
    offload.omp_target_free(d, 0)
    del np
    return out


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("binary", nargs="?")
    parser.add_argument("mib", nargs="?", type=int, default=1024)
    parser.add_argument("--build", metavar="DIR")
    args = parser.parse_args()
    if args.build:
        build(args.build)
        return
    from offload.capi import libdir
    lib = libdir()
    here = os.path.dirname(os.path.abspath(args.binary))
    env = dict(os.environ, LD_LIBRARY_PATH=f"{lib}:{here}:{os.path.dirname(here)}")
    env.pop("OFFLOAD_PLUGINS", None)
    out = subprocess.run([args.binary, str(args.mib)], capture_output=True, text=True,
                         env=env, check=True).stdout
    ours = {}
    for line in out.splitlines():
        name, _, value = line.rpartition(" ")
        ours[name] = float(value)
    size = args.mib << 20
    base = raw(size)
    gbs = {k: size / v / 1e9 for k, v in base.items() if "raw" in k and "Launch" not in k}
    rows = []
    for name, v in ours.items():
        if name.startswith("empty"):
            b = base["raw cuLaunchKernel+sync, empty kernel"]
            rows.append((name, f"{v * 1e6:.1f} us", f"{b * 1e6:.1f} us (raw launch+sync)",
                         f"{v / b:.2f}x"))
            continue
        d2h = "from" in name
        ref = "raw pinned D2H" if d2h else "raw pinned H2D"
        pg = "raw pageable D2H" if d2h else "raw pageable H2D"
        rows.append((name, f"{v:.1f} GB/s", f"{gbs[ref]:.1f} pinned / {gbs[pg]:.1f} pageable",
                     f"{v / gbs[ref]:.2f}x pinned, {v / gbs[pg]:.2f}x pageable"))
    print(f"offload bench/capi_gpu.py: {args.binary} ({args.mib} MiB) on offload's "
          f"libomptarget.so.19.1; host {machine()}")
    print(table(rows, ("operation", "offload", "raw driver (same run)", "ratio")))
    names = [r[0] for r in rows if not r[0].startswith("empty")]
    print(plot(os.path.join(os.environ.get("OUT", HERE), "capi_gpu.png"),
               "clang-19 nvptx program on offload's libomptarget (1 GiB)", names,
               {"GB/s": [ours[n] for n in names]}, "GB/s"))


if __name__ == "__main__":
    main()
