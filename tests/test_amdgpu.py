"""Issue 6: the AMDGPU plugin against the real HSA headers, the real libhsa, and the
HSA simulator (tests/fakes/hsa_sim.c, a test double built here)."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError, targets
from offload.pinned import Kind
from offload.plugins import _hsa_runtime as hsa
from tests.harness import run_threads

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


# ---- the declarations against the real headers ------------------------------------------
@needs_headers
def test_declarations_match_hsa_headers(tmp_path):
    header_text = open(os.path.join(HSA_INCLUDE, "hsa.h")).read() + \
        open(os.path.join(HSA_INCLUDE, "hsa_ext_amd.h")).read()
    elf_text = open(os.path.join(HSA_INCLUDE, "amd_hsa_elf.h")).read()
    consts = {n: getattr(mod, n) for mod in (hsa, targets) for n in dir(mod)
              if re.match(r"((HSA|EF_AMDGPU)_[A-Z0-9_]+|hsa(Host|Device)To(Host|Device))$", n)}
    machines = {f"EF_AMDGPU_MACH_AMDGCN_{p.upper()}": v for v, p in targets.MACHINES.items()
                if re.search(rf"\bEF_AMDGPU_MACH_AMDGCN_{p.upper()}\b", elf_text)}
    fields = {
        "hsa_queue_t": ["type", "features", "base_address", "doorbell_signal", "size", "id"],
        "hsa_kernel_dispatch_packet_t": ["header", "setup", "workgroup_size_x", "grid_size_x",
                                         "private_segment_size", "group_segment_size",
                                         "kernel_object", "kernarg_address",
                                         "completion_signal"],
        "hsa_amd_pointer_info_t": ["size", "type", "agentBaseAddress", "hostBaseAddress",
                                   "sizeInBytes", "userData", "agentOwner", "global_flags"],
        "hsa_pitched_ptr_t": ["base", "pitch", "slice"],
        "hsa_dim3_t": ["x", "y", "z"],
    }
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <hsa/hsa.h>",
             "#include <hsa/hsa_ext_amd.h>", "#include <hsa/amd_hsa_elf.h>",
             "using namespace ELF;", "int main(void) {"]
    for n in list(consts) + list(machines):
        lines.append(f'  printf("{n} %lld\\n", (long long){n});')
    for t, fs in fields.items():
        lines.append(f'  printf("sizeof {t} %zu\\n", sizeof({t}));')
        for f in fs:
            lines.append(f'  printf("offsetof {t}.{f} %zu\\n", offsetof({t}, {f}));')
    for t in ("hsa_agent_t", "hsa_signal_t", "hsa_status_t", "hsa_signal_value_t"):
        lines.append(f'  printf("sizeof {t} %zu\\n", sizeof({t}));')
    lines.append("  return 0; }")
    src = tmp_path / "check.cpp"           # amd_hsa_elf.h is C++ (namespace ELF)
    src.write_text("\n".join(lines))
    res = subprocess.run(["c++", str(src), "-o", str(tmp_path / "check")], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(tmp_path / "check")], check=True, capture_output=True,
                         text=True).stdout
    got = dict(line.rsplit(" ", 1) for line in out.splitlines())
    print(f"checked against {rocm_version()}")
    assert len(consts) > 30 and len(machines) > 20
    for n in consts:
        assert int(got[n]) == consts[n], n
    for n, v in machines.items():
        assert int(got[n]) == v, n
    ffi = hsa.ffi
    for t, fs in fields.items():
        assert int(got[f"sizeof {t}"]) == ffi.sizeof(t), t
        for f in fs:
            assert int(got[f"offsetof {t}.{f}"]) == ffi.offsetof(t, f), f"{t}.{f}"
    for t in ("hsa_agent_t", "hsa_signal_t", "hsa_status_t", "hsa_signal_value_t"):
        assert int(got[f"sizeof {t}"]) == ffi.sizeof(t), t
    assert all(w in header_text for w in ("hsa_amd_memory_lock", "hsa_amd_pointer_info"))


def test_real_libhsa_without_gpu_reports_hsa_status():
    try:
        ctypes.CDLL("libhsa-runtime64.so.1")
    except OSError:
        pytest.skip("libhsa-runtime64.so.1 not installed (Debian libhsa-runtime64-1)")
    if os.path.exists("/dev/kfd"):
        pytest.skip("/dev/kfd exists: this machine may have an AMD GPU")
    env = dict(os.environ, OFFLOAD_PLUGINS="amdgpu,host",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("OFFLOAD_AMDGPU_HSA_LIBRARY", None)
    out = subprocess.run([sys.executable, "-m", "offload.cli"], capture_output=True, text=True,
                         env=env, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("plugin amdgpu:"))
    assert "no devices: hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES" in line
    assert "plugin host: 1 device(s)" in out


# ---- the simulator ---------------------------------------------------------------------
def test_agents_and_offload_info(amd):
    recs = offload.devices()
    assert [r.plugin for r in recs] == ["amdgpu", "amdgpu"]
    assert recs[0].properties["isa"] == "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"
    assert recs[0].properties["processor"] == "gfx90a"


@pytest.mark.parametrize("device", [0, 1])
def test_prelock_twin_on_both_agents(amd, sim, kernels, device):
    n = 1 << 16
    a = np.arange(n, dtype=np.int32)
    with offload.locked(a, device=device) as pin:
        assert pin.device_address != a.ctypes.data          # the agent's own address
        assert sim.hsa_sim_lock_count() == 1
        offload.target(kernels.add_one, a, 0, n, map=[offload.tofrom(a)], device=device,
                       **blocks(n))
        offload.target(kernels.add_one, a, 10, 20, map=[offload.tofrom(a[10:20])],
                       device=device, **blocks(10))
    expect = np.arange(n, dtype=np.int32) + 1
    expect[10:20] += 1
    np.testing.assert_array_equal(a, expect)
    s = offload.runtime.current().manager.get_device(device).stats
    assert s["to unpinned"] == 0 and s["from unpinned"] == 0
    assert sim.hsa_sim_lock_count() == 0


def test_unpinned_data_is_staged(amd, kernels):
    n = 3 * (1 << 20) + 5
    a = np.arange(n, dtype=np.int32)
    offload.target(kernels.add_one, a, 0, n, map=[offload.tofrom(a)], device=1, **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 1)
    assert offload.runtime.current().manager.get_device(1).stats["to unpinned"] == a.nbytes


def test_concurrent_staged_transfers_do_not_share_buffers(amd):
    """Every unpinned byte is staged on HSA: four threads at once, each its own data."""
    arrays = [np.full((5 << 20) // 4, i, np.int32) for i in range(4)]

    def work(a, i):
        for _ in range(3):
            with offload.target_data(offload.to(a), device=0):
                a[:] = -1
                offload.target_update(from_=[a], device=0)
                assert (a == i).all(), f"array {i} came back wrong"

    run_threads(work, [(a, i) for i, a in enumerate(arrays)])


def test_lock_twice_unlock_twice(amd, sim):
    a = np.zeros(4096, np.uint8)
    p1 = offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    p2 = offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    assert p1 == p2 and sim.hsa_sim_lock_count() == 1
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert sim.hsa_sim_lock_count() == 1
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert sim.hsa_sim_lock_count() == 0
    with pytest.raises(OffloadError, match="cannot find locked buffer"):
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)


def test_partial_overlap_rejected_before_hsa_lock(amd, sim):
    a = np.zeros(8192, np.uint8)
    offload.llvm_omp_target_lock_mem(a[1000:], 1000, 0)
    before = sim.hsa_sim_calls(b"hsa_amd_memory_lock")
    assert offload.llvm_omp_target_lock_mem(a[500:], 1000, 0) == 0
    assert sim.hsa_sim_calls(b"hsa_amd_memory_lock") == before
    offload.llvm_omp_target_unlock_mem(a[1000:], 0)
    assert sim.hsa_sim_lock_count() == 0


def test_same_array_used_by_both_agents(amd, sim, kernels):
    """One hsa_amd_memory_lock for every GPU agent, as LLVM's dataLockImpl (review
    item 8): the legacy thunk maps all GPUs at one address; counts stay in PinnedMap."""
    n = 4096
    a = np.arange(n, dtype=np.int32)
    p0 = offload.lock(a, device=0)
    p1 = offload.lock(a, device=1)
    assert len(amd.pinned) == 1                              # one registry entry
    assert sim.hsa_sim_lock_count() == 1                     # one HSA lock for both
    assert p0.device_address == p1.device_address           # one address for every GPU
    for d in (0, 1):
        offload.target(kernels.add_one, a, 0, n, map=[offload.tofrom(a)], device=d,
                       **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 2)
    p1.unlock()
    assert sim.hsa_sim_lock_count() == 1                     # device 0 still uses it
    p0.unlock()
    assert sim.hsa_sim_lock_count() == 0 and len(amd.pinned) == 0
    assert sim.hsa_sim_faults() == 0


def _lock_outside(sim, a):
    agent = ctypes.c_uint64(2)                               # the sim's first GPU agent
    out = ctypes.c_void_p()
    assert sim.hsa_amd_memory_lock(a.ctypes.data, a.nbytes, ctypes.byref(agent), 1,
                                   ctypes.byref(out)) == 0
    return out.value


def test_memory_locked_outside_offload_is_external_and_never_unlocked(amd, sim):
    a = np.zeros(1 << 16, np.uint8)
    agent_base = _lock_outside(sim, a)
    try:
        addr = offload.llvm_omp_target_lock_mem(a[400:], 100, 0)
        assert addr == agent_base + 400                      # agentBase + (ptr - hostBase)
        assert amd.pinned.lookup(a.ctypes.data).kind is Kind.EXTERNAL
        offload.llvm_omp_target_unlock_mem(a[400:], 0)
        assert len(amd.pinned) == 0
        assert sim.hsa_sim_lock_count() == 1                 # still the other owner's
    finally:
        assert sim.hsa_amd_memory_unlock(a.ctypes.data) == 0


def test_external_entry_used_by_second_agent_never_locks_or_unlocks(amd, sim):
    """Someone else's lock maps every GPU (legacy thunk): a second device uses its address
    and offload never locks or unlocks it."""
    a = np.zeros(1 << 16, np.uint8)
    base = _lock_outside(sim, a)
    try:
        assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == base   # found external
        assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 1) == base
        assert sim.hsa_sim_lock_count() == 1
        offload.llvm_omp_target_unlock_mem(a, 1)
        offload.llvm_omp_target_unlock_mem(a, 0)
        assert sim.hsa_sim_lock_count() == 1
    finally:
        sim.hsa_amd_memory_unlock(a.ctypes.data)


def test_interior_pointer_of_prelocked_buffer_in_a_map(amd, sim, kernels):
    """The seed review's offset fix: a mapped section inside a prelocked buffer is
    copied from agentBase + (section - hostBase)."""
    n = 4096
    a = np.arange(n, dtype=np.int32)
    with offload.locked(a, device=0) as pin:
        pieces = amd.pinned.translate(a[100:].ctypes.data, 400, 0)
        assert pieces == [(0, 400, pin.device_address + 400)]
        offload.target(kernels.add_one, a, 100, 200, map=[offload.tofrom(a[100:200])],
                       device=0, **blocks(100))
    expect = np.arange(n)
    expect[100:200] += 1
    np.testing.assert_array_equal(a, expect)


def test_images_for_another_target_are_refused(amd, code_objects):
    dev = offload.runtime.current().manager.get_device(0).generic
    offload.load_image(code_objects["gfx90a:xnack-"])        # matches the agent
    amd.check_binary(offload.load_image(code_objects["gfx90a:xnack-"]).binaries[0], dev)
    with pytest.raises(OffloadError) as ei:
        amd.check_binary(offload.load_image(code_objects["gfx906"]).binaries[0], dev)
    assert ei.value.code is ErrorCode.INVALID_BINARY
    assert "code object is for gfx906, device 0 is gfx90a" in str(ei.value)
    with pytest.raises(OffloadError, match="code object has xnack on, device 0 runs with "
                                           "xnack off"):
        amd.check_binary(offload.load_image(code_objects["gfx90a:xnack+"]).binaries[0], dev)
    os.environ["OMP_TARGET_OFFLOAD"] = "mandatory"
    try:
        offload.shutdown()
        img = offload.load_image(code_objects["gfx906"])
        with pytest.raises(OffloadError, match="no binary for device 0"):
            offload.target(img.add_one, np.zeros(4, np.int32), 0, 4, device=0)
    finally:
        del os.environ["OMP_TARGET_OFFLOAD"]


def test_copy_back_waits_for_the_kernel(amd, sim, kernels):
    """The copy back after a kernel names the kernel's completion signal as a
    dependency (HSA copies and dispatches are not ordered by themselves)."""
    a = np.zeros(1024, np.int32)
    with offload.locked(a, device=0):
        offload.target(kernels.add_one, a, 0, 1024, map=[offload.tofrom(a)], device=0,
                       **blocks(1024))
    assert sim.hsa_sim_last_copy_deps() >= 1
    assert (a == 1).all()


def test_dispatch_packet_carries_grid_and_workgroup(amd, kernels):
    out = np.zeros(4, np.int32)
    offload.target(kernels.shape, out, map=[offload.from_(out)], device=0, teams=3,
                   threads=128)
    np.testing.assert_array_equal(out, [384, 1, 128, 1])


def test_kernel_argument_count_mismatch(amd, kernels):
    a = np.zeros(8, np.int32)
    with pytest.raises(OffloadError, match="takes 3 argument"):
        offload.target(kernels.add_one, a, 0, map=[offload.tofrom(a)], device=0)
    assert len(offload.runtime.current().manager.get_device(0).table) == 0


STATUSES = [0x1000, 0x1001, 0x1003, 0x1004, 0x1008, 0x100B, 0x100D, 0x100F, 0x1010, 0x1013]


def _status_text(sim, status):
    s = ctypes.c_char_p()
    sim.hsa_status_string.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    assert sim.hsa_status_string(status, ctypes.byref(s)) == 0
    return s.value.decode()


@pytest.mark.parametrize("status", STATUSES)
def test_every_hsa_status_becomes_an_offload_error(amd, sim, code_objects, status):
    text = _status_text(sim, status)
    dev = offload.runtime.current().manager.get_device(0)
    a = np.zeros(4096, np.uint8)
    operations = {
        "hsa_amd_memory_lock": lambda: dev.lock(a.ctypes.data, a.nbytes),
        "hsa_amd_memory_pool_allocate": lambda: dev.alloc(1024),
        "hsa_amd_memory_async_copy": lambda: offload.target_enter_data(offload.to(a),
                                                                       device=0),
        "hsa_executable_load_agent_code_object":
            lambda: offload.target(offload.load_image(code_objects["gfx90a"]).add_one,
                                   a, 0, 0, device=0),
        "hsa_amd_pointer_info": lambda: dev.lock(a.ctypes.data, 64),
    }
    for fn, op in operations.items():
        sim.hsa_sim_fail(fn.encode(), status)
        with pytest.raises(OffloadError) as ei:
            op()
        assert text in str(ei.value) and fn in str(ei.value), (fn, str(ei.value))
        assert len(amd.pinned) == 0 and len(dev.table) == 0
    assert sim.hsa_sim_lock_count() == 0


def test_failing_hsa_init_is_the_reason(runtime, sim):
    sim.hsa_sim_fail(b"hsa_init", 0x1008)
    m = runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path)
    assert m.num_devices() == 0
    assert "hsa_init failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES" in m.records[0].reason


def test_failed_unlock_keeps_state(amd, sim):
    a = np.zeros(4096, np.uint8)
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    sim.hsa_sim_fail(b"hsa_amd_memory_unlock", 0x1001)
    with pytest.raises(OffloadError, match="HSA_STATUS_ERROR_INVALID_ARGUMENT"):
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)
    assert amd.pinned.lookup(a.ctypes.data).count == {0: 1}
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert sim.hsa_sim_lock_count() == 0


def test_machine_table_matches_the_compiler(tmp_path):
    """Every EF_AMDGPU_MACH value of ours that clang can target, against clang's output
    (this caught two wrong entries that ROCm 5.2.3's header is too old to define)."""
    if not CLANG:
        pytest.skip("clang-19 not installed: cannot build AMDGPU objects")
    src = tmp_path / "k.c"
    src.write_text("__attribute__((amdgpu_kernel)) void k(int *a) { a[0] = 1; }\n")
    checked = []
    for proc in sorted(set(targets.MACHINES.values())):
        obj = tmp_path / f"{proc}.o"
        res = subprocess.run([CLANG, "--target=amdgcn-amd-amdhsa", f"-mcpu={proc}",
                              "-nogpulib", "-c", str(src), "-o", str(obj)],
                             capture_output=True)
        if res.returncode != 0:          # a processor newer than this clang
            continue
        flags = offload.load_image(obj.read_bytes(), prototypes={}).binaries[0].elf.flags
        assert targets.code_object_target(flags)[0] == proc, (proc, hex(flags))
        checked.append(proc)
    assert len(checked) >= 30, checked


# ---- hardening (issue 11): fuzzed code objects, the stress run on the simulator -------------
def test_fuzzed_code_objects_give_offload_errors(code_objects):
    """At least 500 mutants of a real gfx90a code object (its metadata note included):
    only OffloadError escapes parsing, target checks and metadata reading."""
    import time

    from tests.test_hardening import _mutants, parse_everything
    data = open(code_objects["gfx90a"], "rb").read()
    note = data.find(b"amdhsa.kernels")
    assert note > 0
    deadline = time.monotonic() + 120
    n = 0
    for mutant in _mutants(data, 600, seed=7):
        parse_everything(mutant)
        n += 1
        if time.monotonic() > deadline:
            break
    for i, mutant in enumerate(_mutants(data[note - 64:note + 1024], 300, seed=8)):
        parse_everything(data[:note - 64] + mutant + data[note + 1024:])   # the note itself
        n += 1
    assert n >= 800


def test_sixteen_threads_mixed_stress_on_the_simulator(amd, sim, kernels):
    """The 16-thread mixed run (OFFLOAD_STRESS_SECONDS) over both simulated agents: no
    device allocation and no HSA lock left."""
    from tests.test_hardening import STRESS_S, mixed_stress
    n = mixed_stress(STRESS_S, [0, 1], kernels.add_one, seed=3,
                     args=lambda a: (a, 0, a.size), extra=lambda a: blocks(a.size))
    assert n > 500
    state = offload.testing.state()
    assert all(d["allocations"] == 0 and d["mappings"] == 0 for d in state["devices"].values())
    assert state["pins"]["amdgpu"]["entries"] == 0
    assert sim.hsa_sim_lock_count() == 0


# ---- issue 12: the review's findings, each failing on the old plugin with this simulator ----
def run_bounded(fn, seconds=20):
    """Run fn on a thread; fail (instead of hanging the suite) if it does not return."""
    from tests.harness import background
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as exc:       # noqa: BLE001 - handed to the caller
            out["error"] = exc

    t = background(body)
    t.join(seconds)
    assert not t.is_alive(), f"still waiting after {seconds} s (an unbounded wait)"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_kernarg_is_visible_to_the_gpu_and_reused(amd, sim, kernels):
    """Review 1 and 9a: kernarg memory is allowed for the GPUs (else a memory-access fault
    on the first launch), from an arena: no allocation per launch."""
    a = np.zeros(256, np.int32)
    before_faults = sim.hsa_sim_faults()
    offload.target(kernels.add_one, a, 0, 256, device=0, **blocks(256))
    allocs = sim.hsa_sim_calls(b"hsa_amd_memory_pool_allocate")
    for _ in range(20):
        offload.target(kernels.add_one, a, 0, 256, device=0, **blocks(256))
    assert (a == 21).all()
    assert sim.hsa_sim_faults() == before_faults
    # the 20 launches allocated only the mapped array's device memory (pooled) and nothing
    # per launch for kernargs
    assert sim.hsa_sim_calls(b"hsa_amd_memory_pool_allocate") - allocs <= 2


def test_no_signal_created_per_launch(amd, sim, kernels):
    """Review 9a: completion signals come from a pool."""
    a = np.zeros(64, np.int32)
    offload.target(kernels.add_one, a, 0, 64, device=0, **blocks(64))
    made = sim.hsa_sim_calls(b"hsa_signal_create")
    for _ in range(20):
        offload.target(kernels.add_one, a, 0, 64, device=0, **blocks(64))
    assert sim.hsa_sim_calls(b"hsa_signal_create") - made <= 2


def test_device_to_device_copy_between_gpus(amd, sim):
    """Review 2: the peer GPU is allowed on device memory (else the source GPU's copy
    faults on the destination)."""
    init = offload.omp_get_initial_device()
    src = np.arange(1 << 16, dtype=np.uint8)
    d0 = offload.omp_target_alloc(src.nbytes, 0)
    d1 = offload.omp_target_alloc(src.nbytes, 1)
    faults = sim.hsa_sim_faults()
    assert offload.omp_target_memcpy(d0, src, src.nbytes, 0, 0, 0, init) == 0
    assert offload.omp_target_memcpy(d1, d0, src.nbytes, 0, 0, 1, 0) == 0
    out = np.zeros_like(src)
    assert offload.omp_target_memcpy(out, d1, src.nbytes, 0, 0, init, 1) == 0
    np.testing.assert_array_equal(out, src)
    assert sim.hsa_sim_faults() == faults
    offload.omp_target_free(d0, 0)
    offload.omp_target_free(d1, 1)


def test_gpus_that_never_see_each_other_copy_through_the_host(runtime, sim, monkeypatch):
    """Review 2: NEVER_ALLOWED peers: the exchange is refused and goes through the host."""
    monkeypatch.setenv("HSA_SIM_NO_P2P", "1")
    runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path)
    init = offload.omp_get_initial_device()
    src = np.arange(4096, dtype=np.uint8)
    d0 = offload.omp_target_alloc(src.nbytes, 0)
    d1 = offload.omp_target_alloc(src.nbytes, 1)
    faults = sim.hsa_sim_faults()
    assert offload.omp_target_memcpy(d0, src, src.nbytes, 0, 0, 0, init) == 0
    assert offload.omp_target_memcpy(d1, d0, src.nbytes, 0, 0, 1, 0) == 0
    out = np.zeros_like(src)
    assert offload.omp_target_memcpy(out, d1, src.nbytes, 0, 0, init, 1) == 0
    np.testing.assert_array_equal(out, src)
    assert sim.hsa_sim_faults() == faults


def test_queue_error_becomes_an_offload_error(amd, sim, kernels):
    """Review 3: the queue error callback; the wait is bounded and raises ROCr's message;
    later launches on the device fail at once."""
    a = np.zeros(64, np.int32)
    sim.hsa_sim_fail_dispatch(0x1016)                      # HSA_STATUS_ERROR_EXCEPTION
    with pytest.raises(OffloadError, match="queue stopped on an error: HSA_STATUS_ERROR_"
                                           "EXCEPTION") as ei:
        run_bounded(lambda: offload.target(kernels.add_one, a, 0, 64, device=0, **blocks(64)))
    assert ei.value.code is ErrorCode.BACKEND_FAILURE
    with pytest.raises(OffloadError, match="queue stopped"):
        run_bounded(lambda: offload.target(kernels.add_one, a, 0, 64, device=0, **blocks(64)))
    offload.target(kernels.add_one, a, 0, 64, device=1, **blocks(64))   # the other GPU
    assert (a == 1).all()


def test_failed_copy_is_an_error(amd, sim):
    """Review 4: a copy whose completion signal goes negative fails."""
    a = np.arange(1024, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        sim.hsa_sim_fail_copies(1)
        with pytest.raises(OffloadError, match="signal went to -1"):
            offload.target_update(from_=[a], device=0)


def test_dynamic_call_stack_gets_scratch(amd, sim, kernels):
    """Review 5: a kernel with a dynamic call stack gets a 16 KiB private segment."""
    sim.hsa_sim_set_dynamic_stack(b"shape")
    img = offload.load_image(kernels.binaries[0].data)          # loaded after the flag
    out = np.zeros(4, np.int32)
    faults = sim.hsa_sim_faults()
    run_bounded(lambda: offload.target(img.shape, out, map=[offload.from_(out)], device=1,
                                       teams=2, threads=64))
    assert list(out) == [128, 1, 64, 1] and sim.hsa_sim_faults() == faults


def test_alloc_host_memory_used_on_another_device_is_not_locked(amd, sim, kernels):
    """Review 6: memory HSA allocated is never passed to hsa_amd_memory_lock (ROCr refuses
    it); the device gets access instead."""
    n = 1024
    p = offload.llvm_omp_target_alloc_host(n * 4, 0)
    assert p
    a = np.frombuffer((ctypes.c_int32 * n).from_address(p), dtype=np.int32)
    a[:] = 5
    locks = sim.hsa_sim_calls(b"hsa_amd_memory_lock")
    assert offload.llvm_omp_target_lock_mem(p, n * 4, 1) != 0
    offload.target(kernels.add_one, a, 0, n, map=[offload.tofrom(a)], device=1, **blocks(n))
    assert (a == 6).all()
    assert sim.hsa_sim_calls(b"hsa_amd_memory_lock") == locks
    offload.llvm_omp_target_unlock_mem(p, 1)
    del a
    offload.llvm_omp_target_free_host(p, 0)


@pytest.mark.parametrize("threads,teams,what", [(2048, 1, "threads per team"),
                                                (64, 2**32, "a grid of")])
def test_launch_geometry_is_checked(amd, sim, kernels, threads, teams, what):
    """Review 7: work-group and grid limits give INVALID_VALUE, not a queue error or a
    cffi OverflowError."""
    a = np.zeros(64, np.int32)
    with pytest.raises(OffloadError, match=what) as ei:
        offload.target(kernels.add_one, a, 0, 64, device=0, teams=teams, threads=threads)
    assert ei.value.code is ErrorCode.INVALID_VALUE
    assert len(offload.runtime.current().manager.get_device(0).table) == 0


def test_locks_under_the_svm_thunk(runtime, sim, kernels, monkeypatch):
    """Review 8: ROCm >= 5.7 (device address == host address, unlock a no-op, pointer info
    UNKNOWN): lock, map and copy still work."""
    monkeypatch.setenv("HSA_SIM_SVM", "1")
    runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path)
    n = 4096
    a = np.arange(n, dtype=np.int32)
    with offload.locked(a, device=0) as pin:
        assert pin.device_address == a.ctypes.data
        with offload.locked(a, device=1) as pin1:
            assert pin1.device_address == a.ctypes.data
            for d in (0, 1):
                offload.target(kernels.add_one, a, 0, n, map=[offload.tofrom(a)], device=d,
                               **blocks(n))
    np.testing.assert_array_equal(a, np.arange(n) + 2)
    assert offload.testing.state()["pins"]["amdgpu"]["entries"] == 0
    # the thunk's unlock is a no-op: drop the simulator's lock as a legacy thunk would,
    # or a later test's buffer at this address would find it locked by someone else
    monkeypatch.delenv("HSA_SIM_SVM")
    assert sim.hsa_amd_memory_unlock(a.ctypes.data) == 0


def test_copies_depend_only_on_the_previous_operation(amd, sim, kernels):
    """Review 9c: a copy names at most one dependency (the queue's last operation, if it
    is still pending), not every pending signal."""
    arrays = [np.arange(4096, dtype=np.int32) for _ in range(3)]
    with offload.locked(arrays[0], device=0), offload.locked(arrays[1], device=0), \
            offload.locked(arrays[2], device=0):
        offload.target(kernels.add_one, arrays[0], 0, 4096,
                       map=[offload.tofrom(x) for x in arrays], device=0, **blocks(4096))
    assert sim.hsa_sim_last_copy_deps() <= 1
    assert (arrays[0] == np.arange(4096) + 1).all() and (arrays[2] == np.arange(4096)).all()


def test_several_hardware_queues_per_device(amd, sim, kernels):
    """Review 9d: more than one HSA queue per device (LLVM: 4)."""
    a = np.zeros(64, np.int32)
    offload.target(kernels.add_one, a, 0, 64, device=0, **blocks(64))
    offload.target(kernels.add_one, a, 0, 64, device=1, **blocks(64))
    assert sim.hsa_sim_calls(b"hsa_queue_create") >= 8


def test_executable_validated_and_reader_destroyed_after_freeze(amd, sim, kernels):
    """Review 10: hsa_executable_validate runs; the reader (which borrows the bytes) is
    destroyed after freeze; a failed load leaks no executable."""
    val, rd = sim.hsa_sim_calls(b"hsa_executable_validate"), \
        sim.hsa_sim_calls(b"hsa_code_object_reader_destroy")
    a = np.zeros(64, np.int32)
    offload.target(kernels.add_one, a, 0, 64, device=0, **blocks(64))
    assert sim.hsa_sim_calls(b"hsa_executable_validate") == val + 1
    assert sim.hsa_sim_calls(b"hsa_code_object_reader_destroy") == rd + 1
    destroyed = sim.hsa_sim_calls(b"hsa_executable_destroy")
    sim.hsa_sim_fail(b"hsa_executable_freeze", 0x1001)
    with pytest.raises(OffloadError, match="hsa_executable_freeze"):
        offload.target(kernels.add_one, a, 0, 64, device=1, **blocks(64))
    assert sim.hsa_sim_calls(b"hsa_executable_destroy") == destroyed + 1
    assert sim.hsa_sim_calls(b"hsa_code_object_reader_destroy") == rd + 2


def test_agent_limits_reported(amd):
    info = offload.devices()[0].properties
    assert info["max work-group size"] == 1024


def test_no_memory_fault_in_a_mixed_run(amd, sim, kernels):
    """Everything the plugin hands the (strict) simulator is visible to the agent using
    it: locked, staged, device and kernarg memory, on both GPUs, across many threads."""
    from tests.harness import run_threads
    faults = sim.hsa_sim_faults()

    def work(d):
        for i in range(10):
            a = np.arange(3000 + i, dtype=np.int32)
            if i % 2:
                with offload.locked(a, device=d):
                    offload.target(kernels.add_one, a, 0, a.size, map=[offload.tofrom(a)],
                                   device=d, **blocks(a.size))
            else:
                offload.target(kernels.add_one, a, 0, a.size, map=[offload.tofrom(a)],
                               device=d, **blocks(a.size))
            assert (a == np.arange(a.size) + 1).all()

    run_threads(work, [(0,), (1,), (0,), (1,)])
    assert sim.hsa_sim_faults() == faults


def test_conformance_hsa_simulator(sim, code_objects):
    """Issue 17: the plugin contract, AMDGPU plugin over the (strict) simulator."""
    from offload.config import Config
    from offload.plugins.amdgpu import AMDGPUPlugin
    from offload.testing import run_conformance
    image = offload.load_image(code_objects["gfx90a"])
    report = run_conformance(AMDGPUPlugin, Config(hsa_library=sim.path), image=image)
    assert report.devices == 2 and "kernel" in report.passed


# ---- queues and events (issue 14): signals of their own, barrier-AND packets ----------------
def test_events_and_queue_waits_on_hsa(amd, sim):
    """A copy queued on q1, an event recorded after it, q2 ordered after the event by a
    barrier-AND (no host wait), then a copy back on q2: the data went through in order."""
    n = 32 << 20
    src = np.random.default_rng(5).integers(0, 255, n, dtype=np.uint8)
    out = np.zeros(n, dtype=np.uint8)
    d = offload.omp_target_alloc(n, 0)
    gen = offload.runtime.current().device(0).generic
    with offload.locked(src, device=0) as ps, offload.locked(out, device=0) as po:
        for _ in range(5):
            out[:] = 0
            q1, q2 = offload.stream(0), offload.stream(0)
            gen._submit_impl(d, src.ctypes.data, n, q1.queue, ps.device_address)
            ev = q1.record()
            q2.wait_event(ev)
            gen._retrieve_impl(out.ctypes.data, d, n, q2.queue, po.device_address)
            q2.synchronize()
            assert ev.query()
            np.testing.assert_array_equal(out, src)
            q1.close()
            q2.close()
    empty = offload.stream(0)
    assert empty.record().query()                      # nothing queued: complete at once
    empty.close()
    offload.omp_target_free(d, 0)


# ---- strided updates as SDMA rect copies (issue 14: hsa_amd_memory_async_copy_rect) ----
@pytest.mark.parametrize("lock", [False, True])
def test_strided_update_is_one_rect_copy(amd, sim, lock):
    """A column block of a locked array is one hsa_amd_memory_async_copy_rect from the
    agent address; an unpinned one over the staging threshold is packed into staging
    buffers and moved by rect copies; the data lands exactly, both ways, no fault."""
    sim.hsa_sim_rect_copies.restype = ctypes.c_long
    a = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)      # 1 MiB, rows 4 KiB
    orig = a.copy()
    if lock:
        offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    faults = sim.hsa_sim_faults()
    with offload.target_data(offload.to(a), device=0):
        before = sim.hsa_sim_rect_copies()
        a[:] = -1
        offload.target_update(from_=[a[:, 256:768]], device=0)
        rects = sim.hsa_sim_rect_copies() - before
        assert rects == 1 if lock else rects >= 1
        want = np.full_like(a, -1)
        want[:, 256:768] = orig[:, 256:768]
        assert (a == want).all()
        a[:, 0:128] = 5
        offload.target_update(to=[a[:, 0:128]], device=0)
        a[:] = 0
        offload.target_update(from_=[a], device=0)
        want[:, 0:128] = 5
        want[:, 128:256] = orig[:, 128:256]
        want[:, 768:] = orig[:, 768:]
        assert (a == want).all()
    assert sim.hsa_sim_faults() == faults
    if lock:
        offload.llvm_omp_target_unlock_mem(a, 0)


def test_strided_update_unaligned_falls_back_to_rows(amd, sim):
    """ROCr's rect copies need 4-byte alignment: an odd byte column goes row by row."""
    sim.hsa_sim_rect_copies.restype = ctypes.c_long
    a = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    orig = a.copy()
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    with offload.target_data(offload.to(a), device=0):
        before = sim.hsa_sim_rect_copies()
        a[:] = 0
        offload.target_update(from_=[a[:, 3:10]], device=0)
        assert sim.hsa_sim_rect_copies() == before
        want = np.zeros_like(a)
        want[:, 3:10] = orig[:, 3:10]
        assert (a == want).all()
    offload.llvm_omp_target_unlock_mem(a, 0)
