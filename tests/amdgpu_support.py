"""The AMDGPU tests' shared parts: the HSA simulator (tests/fakes/hsa_sim.c, a test
double built here), real AMDGPU code objects from clang/lld, and the fixtures over them."""
import ctypes
import os
import shutil
import subprocess

import pytest

import offload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HSA_INCLUDE = "/usr/include/hsa"
HAVE_HEADERS = os.path.exists(os.path.join(HSA_INCLUDE, "hsa.h"))
CLANG = shutil.which("clang-19") or shutil.which("clang")
LLD = shutil.which("ld.lld-19") or shutil.which("ld.lld")
needs_headers = pytest.mark.skipif(not HAVE_HEADERS,
                                   reason="HSA headers not installed (libhsa-runtime-dev)")

KERNEL_SRC = r"""
#define KERNEL __attribute__((amdgpu_kernel, visibility("protected")))
KERNEL void add_one(int *a, long lo, long hi) {
  long i = lo + (long)__builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < hi) a[i] += 1;
}
KERNEL void shape(int *out) { out[0] = 1; }
"""

HOST_SRC = r"""
#include <stdint.h>
struct add_one_args { int *a; long lo; long hi; };
void add_one_sim(const void *ka, const uint32_t grid[3], const uint16_t wg[3]) {
  const struct add_one_args *x = ka;
  for (long i = 0; i < (long)grid[0]; ++i) { long j = x->lo + i; if (j < x->hi) x->a[j] += 1; }
}
void shape_sim(const void *ka, const uint32_t grid[3], const uint16_t wg[3]) {
  int *out = *(int *const *)ka;
  out[0] = (int)grid[0]; out[1] = (int)grid[1]; out[2] = wg[0]; out[3] = wg[1];
}
"""


def rocm_version() -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libhsa-runtime-dev"],
                             capture_output=True, text=True).stdout
        return f"ROCm {out.split('-')[0]} (Debian libhsa-runtime-dev {out})" if out else "?"
    except OSError:
        return "?"


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    """Build the simulator with the system C compiler against the real headers."""
    if not HAVE_HEADERS:
        pytest.skip("HSA headers not installed (libhsa-runtime-dev): cannot build the simulator")
    out = tmp_path_factory.mktemp("hsa_sim") / "libhsa_sim.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out),
                    os.path.join(ROOT, "tests", "fakes", "hsa_sim.c"), "-lpthread"],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(str(out))
    lib.hsa_sim_register_kernel.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.hsa_sim_fail.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.hsa_sim_calls.argtypes = [ctypes.c_char_p]
    lib.hsa_sim_calls.restype = ctypes.c_long
    lib.hsa_sim_lock_count.restype = ctypes.c_long
    lib.hsa_sim_last_copy_deps.restype = ctypes.c_uint32
    lib.hsa_sim_faults.restype = ctypes.c_long
    lib.hsa_sim_allow_count.restype = ctypes.c_long
    lib.hsa_sim_fail_copies.argtypes = [ctypes.c_long]
    lib.hsa_sim_fail_dispatch.argtypes = [ctypes.c_int]
    lib.hsa_sim_set_dynamic_stack.argtypes = [ctypes.c_char_p]
    lib.hsa_amd_memory_lock.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lib.hsa_amd_memory_unlock.argtypes = [ctypes.c_void_p]
    host = offload.compile_c(HOST_SRC)
    host_so = out.parent / "sim_kernels.so"
    host_so.write_bytes(host.binaries[0].data)
    hk = ctypes.CDLL(str(host_so))
    for name in ("add_one", "shape"):
        fn = ctypes.cast(getattr(hk, f"{name}_sim"), ctypes.c_void_p).value
        assert lib.hsa_sim_register_kernel(name.encode(), fn) == 0
    lib.keep = hk
    lib.path = str(out)
    return lib


@pytest.fixture(scope="session")
def code_objects(tmp_path_factory):
    """Real AMDGPU code objects from clang/lld: {target id: path}."""
    if not (CLANG and LLD):
        pytest.skip("clang-19 / ld.lld-19 not installed: cannot build AMDGPU code objects")
    d = tmp_path_factory.mktemp("amdgcn")
    src = d / "k.c"
    src.write_text(KERNEL_SRC)
    out = {}
    for target in ("gfx90a", "gfx90a:xnack-", "gfx90a:xnack+", "gfx906"):
        tag = target.replace(":", "_").replace("+", "on").replace("-", "off")
        obj, so = d / f"{tag}.o", d / f"{tag}.so"
        subprocess.run([CLANG, "--target=amdgcn-amd-amdhsa", f"-mcpu={target}", "-nogpulib",
                        "-O2", "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
        subprocess.run([LLD, "-shared", str(obj), "-o", str(so)], check=True,
                       capture_output=True)
        out[target] = str(so)
    return out


@pytest.fixture
def amd(runtime, sim):
    """A fresh runtime whose only plugin is AMDGPU over the simulator; yields the plugin."""
    m = runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path)
    assert m.num_devices() == 2, m.records
    return m.plugins[0]


@pytest.fixture
def kernels(code_objects):
    return offload.load_image(code_objects["gfx90a"])


def blocks(n, t=64):
    return dict(teams=(n + t - 1) // t, threads=t)
