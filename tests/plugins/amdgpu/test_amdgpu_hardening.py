"""The AMDGPU plugin under attack on the HSA simulator: fuzzed code objects, a 16-thread
stress run (issue 11), and each finding of the AMDGPU review failing on the old plugin
(issue 12)."""
import ctypes

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from tests.amdgpu_support import blocks
from tests.harness import run_threads


# ---- hardening (issue 11): fuzzed code objects, the stress run on the simulator -------------
def test_fuzzed_code_objects_give_offload_errors(code_objects):
    """At least 500 mutants of a real gfx90a code object (its metadata note included):
    only OffloadError escapes parsing, target checks and metadata reading."""
    import time

    from tests.runtime.test_hardening_inputs import _mutants, parse_everything
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
    from tests.hardening_support import STRESS_S
    from tests.runtime.test_hardening_inputs import mixed_stress
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
    """The plugin contract, AMDGPU plugin over the (strict) simulator."""
    from offload.config import Config
    from offload.plugins.amdgpu import AMDGPUPlugin
    from offload.testing import run_conformance
    image = offload.load_image(code_objects["gfx90a"])
    report = run_conformance(AMDGPUPlugin, Config(hsa_library=sim.path), image=image)
    assert report.devices == 2 and "kernel" in report.passed


