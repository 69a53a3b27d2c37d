"""What the CUDA fault and limit tests share: the GPU marks, a CUDA runtime, kernels."""
import os
import subprocess
import sys
import textwrap

import pytest

import offload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cuda_devices():
    from offload.config import read
    from offload.plugins.cuda import CUDAPlugin
    p = CUDAPlugin(read())
    return p.number_of_devices(), p.reason


NUM, WHY = _cuda_devices()
gpu = pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}")
two_gpus = pytest.mark.skipif(NUM < 2, reason=f"needs two CUDA devices ({NUM} here)")

KERNELS = r'''
extern "C" __global__ void add_one(int *a, long lo, long hi) {
  long i = lo + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < hi) a[i] += 1;
}
extern "C" __global__ void slow_set(int *a, long n, int v) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  for (int k = 0; k < 2000; ++k) __nanosleep(100000);
  if (i < n) a[i] = v;
}
extern "C" __global__ void shared_sum(int *out, int n) {
  extern __shared__ int buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) { long s = 0; for (int i = 0; i < n; ++i) s += buf[i]; out[0] = (int)s; }
}
extern "C" __global__ void scale(float *a, long n, float f) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) a[i] *= f;
}
'''


def run_script(code, timeout=120, **env):
    path = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=path, **env))


@pytest.fixture(scope="module")
def k():
    return offload.compile_cuda(KERNELS)


@pytest.fixture
def cu(runtime):
    m = runtime(OFFLOAD_PLUGINS="cuda")
    return m.plugins[0]


def blocks(n, t=256):
    return dict(teams=(n + t - 1) // t, threads=t)
