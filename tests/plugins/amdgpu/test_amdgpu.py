"""The AMDGPU plugin against the real HSA headers, the real libhsa, and the
HSA simulator (tests/fakes/hsa_sim.c, a test double built here)."""
import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError, targets
from offload.pinned import Kind
from offload.plugins import _hsa_runtime as hsa
from tests.amdgpu_support import CLANG, HSA_INCLUDE, ROOT, blocks, needs_headers, rocm_version
from tests.harness import run_threads


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


