"""BabelStream (UoB-HPC/BabelStream) on one GPU: its OpenMP model built by clang-19 for
nvptx and run on offload's drop-in libomptarget.so.19.1, against its CUDA model (nvcc) in
the same run, kernel by kernel (Copy, Mul, Add, Triad, Dot). The OpenMP model runs twice:
with LLVM 19's launch geometry (teams capped at 3200) and with
LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT=false (one thread per element: what offload
launched before it followed LLVM 19).

Two more measurements say where a gap comes from: the CUDA model rebuilt with
UNROLL_FACTOR=1 (one element per thread and no unrolling: the shape of clang-19's
kernels, one load in flight per thread), and the cost of one construct, the best time of
each kernel at 1,024 elements (launch and wait: the `update from(a[0:0])` BabelStream
adds after each kernel is for Cray's compiler only), against the CUDA model's launch and
wait.

`--build BABELSTREAM_SRC DIR` (on a machine with clang-19; BABELSTREAM_SRC a checkout)
builds DIR/omp-stream and copies the sources to DIR/src. On the GPU machine:
`python bench/babelstream.py DIR` (libomp.so.5 in DIR) builds DIR/cuda-stream there with
nvcc when it is missing (its CUDA model needs NVML's header), then runs. Prints MB/s and
ratios to CUDA; writes babelstream.png ($OUT or bench/). `--llvm-lib LIBDIR` (LLVM 19's
own libomptarget.so.19.1 and the libraries it needs, e.g. Debian's, whose CUDA plugin
opens libcuda) also runs the same binary on LLVM 19's runtime: the bandwidth and the
construct beside offload's.

`--host BABELSTREAM_SRC` (a machine with clang-19 and libomp-19-dev, no GPU): the OpenMP
model built for x86_64 offloading, each construct's best time at 1,024 doubles with
OMP_NUM_THREADS=1 on offload's library and on LLVM 19's, three rounds interleaved,
medians of the rounds; prints the ratios.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._util import arguments, machine, plot, table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = ["Copy", "Mul", "Add", "Triad", "Dot"]
_SCALE = {"MB": 1.0, "GB": 1e3, "TB": 1e6, "MiB": 1.048576, "GiB": 1073.741824,
          "TiB": 1099511.627776}          # BabelStream's units, in MB


def _cuda_home() -> str:
    return next((p for p in ("/usr/local/cuda-13.0", "/usr/local/cuda") if os.path.isdir(p)),
                "/usr/local/cuda")


def build(src: str, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, LIBRARY_PATH="/usr/lib/llvm-19/lib")
    s = os.path.join(src, "src")
    subprocess.run(["clang++-19", "-O3", "-std=c++17", "-fopenmp",
                    "-fopenmp-targets=nvptx64-nvidia-cuda", "--offload-arch=sm_90",
                    f"--cuda-path={_cuda_home()}", "-DOMP", "-DOMP_TARGET_GPU", f"-I{s}",
                    f"-I{s}/omp", f"{s}/main.cpp", f"{s}/omp/OMPStream.cpp",
                    "-o", os.path.join(out_dir, "omp-stream")], check=True, env=env)
    shutil.copytree(s, os.path.join(out_dir, "src"), dirs_exist_ok=True)
    libomp = "/usr/lib/llvm-19/lib/libomp.so.5"
    if os.path.exists(libomp):
        shutil.copy(libomp, out_dir)


def build_cuda(d: str, name: str = "cuda-stream", unroll: int = 4) -> None:
    """BabelStream's CUDA model, built with nvcc where the GPU is (NVML linked)."""
    s = os.path.join(d, "src")
    nvcc = shutil.which("nvcc") or os.path.join(_cuda_home(), "bin", "nvcc")
    subprocess.run([nvcc, "-O3", "-std=c++17", "-arch=sm_90", "--extended-lambda", "-DCUDA",
                    "-DGRID_STRIDE", f"-DUNROLL_FACTOR={unroll}", f"-I{s}",
                    f"-I{s}/cuda", f"{s}/main.cpp", f"{s}/cuda/CUDAStream.cu", "-lnvidia-ml",
                    "-o", os.path.join(d, name)], check=True)


def host(src: str, rounds: int = 3, times: int = 4000) -> None:
    """The OpenMP model on the host device under both libraries (`--host`)."""
    import statistics
    import tempfile

    from offload.capi import libdir
    llvm_lib = "/usr/lib/llvm-19/lib"
    s = os.path.join(src, "src")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "omp-stream-host")
        subprocess.run(["clang++-19", "-O3", "-std=c++17", "-fopenmp",
                        "-fopenmp-targets=x86_64-unknown-linux-gnu", "-DOMP", "-DOMP_TARGET_GPU",
                        "-w", f"-I{s}", f"-I{s}/omp", f"{s}/main.cpp", f"{s}/omp/OMPStream.cpp",
                        "-o", exe], check=True, env=dict(os.environ, LIBRARY_PATH=llvm_lib))
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
        libs = {"offload": f"{libdir()}:{llvm_lib}", "LLVM 19": llvm_lib}
        got: dict[str, dict[str, list[float]]] = {who: {} for who in libs}
        for _ in range(rounds):
            for who, path in libs.items():
                best = run(exe, 1024, times, dict(base, OMP_NUM_THREADS="1",
                                                  LD_LIBRARY_PATH=path), "min_runtime")
                for k in KERNELS:
                    got[who].setdefault(k, []).append(best[k])
    med = {who: {k: statistics.median(v) for k, v in r.items()} for who, r in got.items()}
    print(f"offload bench/babelstream.py --host: one construct at 1024 doubles, best of "
          f"{times}, median of {rounds} interleaved rounds; host {machine()}")
    print(table([(k, f"{med['offload'][k] * 1e6:.2f}", f"{med['LLVM 19'][k] * 1e6:.2f}",
                  f"{med['offload'][k] / med['LLVM 19'][k]:.2f}x") for k in KERNELS],
                ("kernel", "offload us", "LLVM 19 us", "ratio")))


def run(exe: str, size: int, times: int, env: dict[str, str],
        col: str = "max_") -> dict[str, float]:
    """MB/s of each kernel (BabelStream's --csv, whatever its unit: the best of `times`
    runs); with col="min_runtime", the best time of each in seconds."""
    res = subprocess.run([exe, "-s", str(size), "-n", str(times), "--csv"],
                         capture_output=True, text=True, env=env, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"{exe} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    rows = csv.DictReader(io.StringIO(res.stdout[res.stdout.index("function"):]))
    if col == "min_runtime":
        return {r["function"]: float(r[col]) for r in rows}
    col = next(c for c in rows.fieldnames or () if c.startswith("max_") and c.endswith("_per_sec"))
    return {r["function"]: float(r[col]) * _SCALE[col[4:-8]] for r in rows}


def main() -> None:
    p = arguments(__doc__)
    p.add_argument("dir", nargs="?", help="directory with omp-stream and cuda-stream")
    p.add_argument("--build", nargs=2, metavar=("BABELSTREAM_SRC", "DIR"))
    p.add_argument("--size", type=int, default=1 << 25, help="elements per array (2^25)")
    p.add_argument("--times", type=int, default=100)
    p.add_argument("--teams", type=int, default=0,
                   help="also run with OMP_NUM_TEAMS=N (the standard cap on teams; e.g. one "
                        "wave of resident blocks: SMs x 16 for clang's 128-thread kernels)")
    p.add_argument("--llvm-lib", metavar="LIBDIR",
                   help="also run on LLVM 19's own libomptarget from LIBDIR")
    p.add_argument("--host", metavar="BABELSTREAM_SRC",
                   help="the constructs on the host device, offload against LLVM 19")
    args = p.parse_args()
    if args.build:
        build(*args.build)
        return
    if args.host:
        host(args.host)
        return
    from offload.capi import libdir
    d = os.path.abspath(args.dir)
    if not os.path.exists(os.path.join(d, "cuda-stream")):
        build_cuda(d)
    if not os.path.exists(os.path.join(d, "cuda-stream-1")):
        build_cuda(d, "cuda-stream-1", unroll=1)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
    omp_env = dict(base, LD_LIBRARY_PATH=f"{libdir()}:{d}")
    cuda = run(os.path.join(d, "cuda-stream"), args.size, args.times, base)
    llvm = run(os.path.join(d, "omp-stream"), args.size, args.times, omp_env)
    flat = run(os.path.join(d, "omp-stream"), args.size, args.times,
               dict(omp_env, LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT="false"))
    one = run(os.path.join(d, "cuda-stream-1"), args.size, args.times, base)
    capped = run(os.path.join(d, "omp-stream"), args.size, args.times,
                 dict(omp_env, OMP_NUM_TEAMS=str(args.teams))) if args.teams else None
    theirs_env = dict(base, LD_LIBRARY_PATH=f"{os.path.abspath(args.llvm_lib)}:{d}") \
        if args.llvm_lib else None
    theirs = run(os.path.join(d, "omp-stream"), args.size, args.times, theirs_env) \
        if theirs_env else None
    rows = [(k, f"{cuda[k]:.0f}", f"{llvm[k]:.0f}", f"{llvm[k] / cuda[k]:.2f}x",
             f"{flat[k]:.0f}", f"{flat[k] / cuda[k]:.2f}x", f"{one[k] / cuda[k]:.2f}x",
             *((f"{capped[k]:.0f}", f"{capped[k] / cuda[k]:.2f}x") if capped else ()),
             *((f"{theirs[k]:.0f}", f"{theirs[k] / cuda[k]:.2f}x") if theirs else ()))
            for k in KERNELS]
    small = 1024
    c_us = run(os.path.join(d, "cuda-stream"), small, 200, base, "min_runtime")
    o_us = run(os.path.join(d, "omp-stream"), small, 200, omp_env, "min_runtime")
    t_us = run(os.path.join(d, "omp-stream"), small, 200, theirs_env, "min_runtime") \
        if theirs_env else None
    costs = [(k, f"{c_us[k] * 1e6:.1f}", f"{o_us[k] * 1e6:.1f}", f"{o_us[k] / c_us[k]:.2f}x",
              *((f"{t_us[k] * 1e6:.1f}", f"{t_us[k] / c_us[k]:.2f}x") if t_us else ()))
             for k in KERNELS]
    print(f"offload bench/babelstream.py: {args.size} doubles per array, best of "
          f"{args.times}; host {machine()}")
    print(table(rows, ("kernel", "CUDA MB/s", "OpenMP on offload, LLVM 19 grid", "ratio",
                       "one thread per element", "ratio", "CUDA unroll 1 ratio",
                       *((f"OMP_NUM_TEAMS={args.teams}", "ratio") if capped else ()),
                       *(("OpenMP on LLVM 19's libomptarget", "ratio") if theirs else ()))))
    print(f"\none construct at {small} doubles (best of 200), us")
    print(table(costs, ("kernel", "CUDA launch+wait", "OpenMP construct on offload",
                        "ratio (goal <= 2x)",
                        *(("on LLVM 19's libomptarget", "ratio") if t_us else ()))))
    print(plot(os.path.join(os.environ.get("OUT", HERE), "babelstream.png"),
               "BabelStream on one H200: OpenMP (clang-19) on offload vs CUDA", KERNELS,
               {"CUDA": [cuda[k] for k in KERNELS],
                "OpenMP, LLVM 19 grid": [llvm[k] for k in KERNELS],
                "OpenMP, one thread per element": [flat[k] for k in KERNELS],
                **({f"OpenMP, OMP_NUM_TEAMS={args.teams}": [capped[k] for k in KERNELS]}
                   if capped else {}),
                **({"OpenMP on LLVM 19's libomptarget": [theirs[k] for k in KERNELS]}
                   if theirs else {})}, "MB/s"))


if __name__ == "__main__":
    main()
