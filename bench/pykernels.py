"""Kernels written in Python (issue 32), each against baselines in the same run (median
per call over 5 batches, data already on the device):

- GPU (when a CUDA device is there): a 2-D 5-point stencil step and a dot product
  through `@offload.kernel` against the same kernel in CUDA C through compile_cuda
  (launched by offload.target too) and against numba's own `@cuda.jit` of the same body;
- host: the same two kernels on the initial device against `numba.njit(parallel=True)`
  of the same loop, and the stencil against its numpy-expression version;
- first-call compile time (an empty compile cache) and a cached call's.
Checks every result against numpy; prints a table of ratios and writes bench/pykernels.png.
Usage: python bench/pykernels.py [--gpu-n N] [--dot-n N] [--host-n N]
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import numba
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_CACHE_DIR", tempfile.mkdtemp())     # an empty cache

import offload  # noqa: E402
from bench import _util  # noqa: E402
from bench._util import arguments, machine, plot, table  # noqa: E402


@offload.kernel
def stencil(u, v):
    n, m = u.shape
    for i in offload.prange(1, n - 1):
        for j in range(1, m - 1):
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@offload.kernel
def dot(a, b, out):
    s = 0.0
    for i in offload.prange(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


CUDA_C = r'''
extern "C" __global__ void stencil_c(const float *u, float *v, long n, long m) {
  long k = blockIdx.x * (long)blockDim.x + threadIdx.x;
  for (; k < (n - 2) * (m - 2); k += (long)gridDim.x * blockDim.x) {
    long i = k / (m - 2) + 1, j = k % (m - 2) + 1;
    v[i * m + j] = 0.25f * (u[(i - 1) * m + j] + u[(i + 1) * m + j] + u[i * m + j - 1]
                            + u[i * m + j + 1]);
  }
}
extern "C" __global__ void dot_c(const float *a, const float *b, double *out, long n) {
  double s = 0.0;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x)
    s += a[i] * b[i];
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}
'''


def per_call(fn, n: int) -> float:
    fn()
    return _util.per_call(fn, repeat=5, number=n)


def stencil_ref(u):
    v = np.zeros_like(u)
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


def check(name: str, ok: bool, problems: list) -> None:
    if not ok:
        problems.append(name)


def gpu_rows(n2: int, nd: int, problems: list) -> list[tuple]:
    from numba import cuda
    rows = []
    u = np.random.default_rng(1).random((n2, n2), dtype=np.float32)
    v = np.zeros_like(u)
    a = np.random.default_rng(2).random(nd, dtype=np.float32)
    b = np.random.default_rng(3).random(nd, dtype=np.float32)
    out = np.zeros(1)
    ref = float(np.dot(a.astype(np.float64), b.astype(np.float64)))
    t = time.perf_counter()
    offload.target(stencil, u, v, map=[offload.to(u), offload.from_(v)], device=0)
    first = time.perf_counter() - t
    check("gpu stencil", np.allclose(v, stencil_ref(u), rtol=1e-5), problems)
    offload.target(dot, a, b, out, map=[offload.to(a), offload.to(b), offload.from_(out)],
                   device=0)
    check("gpu dot", abs(out[0] - ref) < 1e-3 * abs(ref), problems)
    k = offload.compile_cuda(CUDA_C)
    dev = cuda.get_current_device()
    sms = dev.MULTIPROCESSOR_COUNT
    with offload.target_data(offload.to(u), offload.alloc(v), offload.to(a), offload.to(b),
                             offload.alloc(out), device=0):
        t = time.perf_counter()
        offload.target(stencil, u, v, device=0)
        cached = time.perf_counter() - t
        grid = min(8 * sms, -(-(n2 - 2) * (n2 - 2) // 256))
        py_s = per_call(lambda: offload.target(stencil, u, v, device=0), 20)
        c_s = per_call(lambda: offload.target(k.stencil_c, u, v, n2, n2, teams=grid,
                                              threads=256, device=0), 20)
        py_d = per_call(lambda: offload.target(dot, a, b, out, device=0), 20)
        c_d = per_call(lambda: offload.target(k.dot_c, a, b, out, nd, teams=8 * sms,
                                              threads=256, device=0), 20)
    nb_stencil, nb_dot = numba_kernels()
    du, dv = cuda.to_device(u), cuda.to_device(v)
    da, db, do = cuda.to_device(a), cuda.to_device(b), cuda.to_device(out)

    def nb_s():
        nb_stencil[grid, 256](du, dv)
        cuda.synchronize()

    def nb_d():
        nb_dot[8 * sms, 256](da, db, do)
        cuda.synchronize()
    n_s, n_d = per_call(nb_s, 20), per_call(nb_d, 20)
    check("numba stencil", np.allclose(dv.copy_to_host(), stencil_ref(u), rtol=1e-5),
          problems)
    rows += [(f"GPU stencil {n2}x{n2} f32", py_s * 1e6, c_s * 1e6, c_s / py_s,
              n_s * 1e6, n_s / py_s),
             (f"GPU dot {nd:.0e} f32", py_d * 1e6, c_d * 1e6, c_d / py_d, n_d * 1e6,
              n_d / py_d)]
    rows.append((f"GPU compile: first {first:.2f} s, cached call {cached * 1e3:.2f} ms",
                 0, 0, 0, 0, 0))
    return rows


def numba_kernels():
    from numba import cuda

    @cuda.jit
    def nb_stencil(u, v):
        n, m = u.shape
        k = cuda.grid(1)
        while k < (n - 2) * (m - 2):
            i, j = k // (m - 2) + 1, k % (m - 2) + 1
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            k += cuda.gridsize(1)

    @cuda.jit
    def nb_dot(a, b, out):
        s = 0.0
        i = cuda.grid(1)
        while i < a.shape[0]:
            s += a[i] * b[i]
            i += cuda.gridsize(1)
        off = 16
        while off > 0:
            s += cuda.shfl_down_sync(0xFFFFFFFF, s, off)
            off //= 2
        if cuda.laneid == 0:
            cuda.atomic.add(out, 0, s)
    return nb_stencil, nb_dot


def host_rows(n2: int, nd: int, problems: list) -> list[tuple]:
    u = np.random.default_rng(1).random((n2, n2))
    v = np.zeros_like(u)
    a = np.random.default_rng(2).random(nd)
    b = np.random.default_rng(3).random(nd)
    out = np.zeros(1)
    host = offload.omp_get_initial_device()   # the host binary on the arrays themselves
    t = time.perf_counter()
    offload.target(stencil, u, v, device=host)
    first = time.perf_counter() - t
    check("host stencil", np.allclose(v, stencil_ref(u)), problems)
    offload.target(dot, a, b, out, device=host)
    check("host dot", abs(out[0] - np.dot(a, b)) < 1e-9 * nd, problems)
    nj_s = numba.njit(parallel=True)(_plain_stencil)
    nj_d = numba.njit(parallel=True)(_plain_dot)
    w = np.zeros_like(u)
    nj_s(u, w)
    nj_d(a, b, out)
    py_s = per_call(lambda: offload.target(stencil, u, v, device=host), 10)
    py_d = per_call(lambda: offload.target(dot, a, b, out, device=host), 10)
    ref_s = per_call(lambda: nj_s(u, w), 10)
    np_s = per_call(lambda: stencil_ref(u), 10)
    ref_d = per_call(lambda: nj_d(a, b, out), 10)
    return [(f"host stencil {n2}x{n2} f64", py_s * 1e6, ref_s * 1e6, ref_s / py_s,
             np_s * 1e6, np_s / py_s),
            (f"host dot {nd:.0e} f64", py_d * 1e6, ref_d * 1e6, ref_d / py_d, 0, 0),
            (f"host compile: first {first:.2f} s", 0, 0, 0, 0, 0)]


def _plain_stencil(u, v):
    n, m = u.shape
    for i in numba.prange(1, n - 1):
        for j in range(1, m - 1):
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def _plain_dot(a, b, out):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


def main() -> None:
    p = arguments(__doc__)
    p.add_argument("--gpu-n", type=int, default=8192)
    p.add_argument("--dot-n", type=int, default=10**8)
    p.add_argument("--host-n", type=int, default=2048)
    args = p.parse_args()
    problems: list = []
    rows = []
    gpus = [d for d in offload.devices() if d.plugin == "cuda"]
    if gpus:
        rows += gpu_rows(args.gpu_n, args.dot_n, problems)
    rows += host_rows(args.host_n, min(args.dot_n, 10**7), problems)
    print(machine())
    print(table(rows, ("case", "offload.kernel us", "baseline us", "ratio (>1: faster)",
                       "second baseline us", "ratio")))
    print("baselines: GPU: CUDA C via compile_cuda, then numba @cuda.jit; host: "
          "numba.njit(parallel=True), then the numpy expression")
    cases = [r for r in rows if r[1]]
    print(plot(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pykernels.png"),
               "offload.kernel against the same kernel elsewhere (time per call)",
               [r[0] for r in cases],
               {"offload.kernel": [r[1] for r in cases], "baseline": [r[2] for r in cases],
                "second baseline": [r[4] or 1e-3 for r in cases]}, "microseconds"))
    print("PASS" if not problems else f"FAIL: {', '.join(problems)}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
