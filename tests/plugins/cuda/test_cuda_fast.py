"""The CUDA plugin's one-call copy/launch-and-wait helper (offload/plugins/_cuda_fast.py)
and the accelerator's CUDA copier and launcher (offload/accel_c), driven through stand-in
driver functions (the test double tests/fakes/cuda_driver.py), so they run without a GPU.
The GPU suites (test_cuda.py, test_cuda_faults.py, test_single_range_paths.py) exercise
them on the real driver."""
import contextlib

import numpy as np
import pytest

import offload
from offload.plugins import _cuda_fast
from offload.plugins.accel_specs import CudaCopier, LaunchSpec
from tests.fakes.cuda_driver import NOT_READY, Dead, Driver, ffi


@pytest.fixture(scope="module")
def helper():
    lib = _cuda_fast.load()
    if lib is None:
        pytest.skip("no C compiler to build the helper with")
    return lib


def test_copy_then_wait_until_the_stream_is_done(helper):
    src = np.arange(64, dtype=np.uint8)
    dst = np.zeros(64, np.uint8)
    d = Driver(busy_polls=3)
    rc = d.copy_wait(helper, dst.ctypes.data, src.ctypes.data, 64)
    assert rc == 0
    assert (dst == src).all()
    assert d.calls[0] == ("ctx", 0xC7)
    assert d.calls[1] == ("copy", dst.ctypes.data, src.ctypes.data, 64, 0x57)
    assert d.calls[2:] == [("query",)] * 4               # three not ready, then done


def test_a_failing_step_stops_there_and_returns_its_code(helper):
    d = Driver(ctx_rc=201)                               # CUDA_ERROR_INVALID_CONTEXT
    assert d.copy_wait(helper, 0, 0, 0) == 201
    assert [c[0] for c in d.calls] == ["ctx"]
    d = Driver(op_rc=1)                                  # CUDA_ERROR_INVALID_VALUE
    assert d.copy_wait(helper, 0, 0, 0) == 1
    assert [c[0] for c in d.calls] == ["ctx", "copy"]    # no wait after a refused copy
    d = Driver(done_rc=700)                              # a fault reported by the wait
    assert d.copy_wait(helper, 0, 0, 0) == 700


def test_a_copy_outlasting_the_spin_comes_back_not_ready(helper):
    d = Driver(busy_polls=-1)
    assert d.copy_wait(helper, 0, 0, 0, spin=2e-3) == NOT_READY   # the caller polls on
    assert len(d.calls) > 3


def test_launch_passes_the_geometry_and_parameters_then_waits(helper):
    d = Driver(busy_polls=1)
    f = d.fns
    slot = ffi.new("unsigned long long *", 0xABCDEF)
    params = ffi.new("void *[]", [slot])
    rc = helper.offload_launch_wait(f["ctx"], ffi.cast("void *", 0xC7), f["launch"],
                                    ffi.cast("void *", 0xF00), 7, 96, 1024,
                                    ffi.cast("void *", 0x57), params, f["query"], 1.0)
    assert rc == 0
    assert d.calls[1] == ("launch", 0xF00, 7, 1, 1, 96, 1, 1, 1024, 0x57, 0xABCDEF, True)
    assert d.calls[2:] == [("query",)] * 2


def test_the_wait_policys_spin_queries_until_done_or_its_time_is_up(helper):
    """offload_query_spin (waits.poll's spin, one call without the GIL): queries until the
    stream is done and returns its result, or NOT_READY once `spin` seconds passed."""
    d = Driver(busy_polls=3)
    assert helper.offload_query_spin(d.fns["query"], ffi.cast("void *", 0x57), 1.0) == 0
    assert d.calls == [("query",)] * 4
    d = Driver(busy_polls=-1)
    assert helper.offload_query_spin(d.fns["query"], ffi.cast("void *", 0x57), 1e-3) == \
        NOT_READY
    assert len(d.calls) > 2
    d = Driver(done_rc=700)
    assert helper.offload_query_spin(d.fns["query"], ffi.cast("void *", 0x57), 1.0) == 700


# ---- the accelerator's CUDA copier (offload/accel_c), on a host table ----------------
def _cuda_copier(monkeypatch, d, polls, checks, streams=(0x51, 0x52)):
    """Make host tables built from now on copy updates through the accelerator's CUDA
    copier, with `d`'s stand-in driver functions."""
    from offload.plugins.host import HostDevice

    def poll(stream):
        polls.append(stream)
        d.busy_polls = 0
        return 0

    def check(rc, what):
        checks.append((rc, what))
        raise offload.OffloadError(offload.ErrorCode.BACKEND_FAILURE, f"{what} failed: {rc}")

    def addr(f):
        return int(ffi.cast("uintptr_t", f))
    f = d.fns
    monkeypatch.setattr(HostDevice, "accel_copier", lambda self: CudaCopier(
        "cuda", addr(f["ctx"]), 0xC7, addr(f["copy"]), addr(f["copy"]), addr(f["query"]),
        1e-3, tuple(streams), tuple(f"stream{i}" for i in range(len(streams))), poll, check,
        Dead(), self.id, 0, addr(f["launch"]), addr(f["memset"])))


@pytest.fixture
def accel_table(runtime):
    from offload import _accel
    if _accel.load() is None:
        pytest.skip("the accelerator does not build here")
    return runtime


def _start(accel_table, monkeypatch, d):
    """A host runtime whose tables copy updates through `d`: (device, polls, checks)."""
    polls, checks = [], []
    _cuda_copier(monkeypatch, d, polls, checks)
    accel_table(OFFLOAD_ACCEL=1)            # the compiled core's paths, whatever the suite's
    return offload.runtime.current().device(0), polls, checks


@contextlib.contextmanager
def _pinned(a):
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    try:
        yield
    finally:
        offload.llvm_omp_target_unlock_mem(a, 0)


def test_the_accelerator_copies_a_pinned_update_through_the_driver_and_waits(accel_table,
                                                                            monkeypatch):
    d = Driver(busy_polls=2)
    dev, polls, checks = _start(accel_table, monkeypatch, d)
    a = np.arange(1024, dtype=np.int32)
    with _pinned(a):
        offload.target_enter_data(offload.to(a), device=0)
        tgt = offload.omp_get_mapped_ptr(a, 0)
        d.calls.clear()
        a += 5
        offload.target_update(to=[a], device=0)            # whole: through the copier
        assert d.calls[:2] == [("ctx", 0xC7), ("copy", tgt, a.ctypes.data, a.nbytes, 0x51)]
        assert d.calls[2:] == [("query",)] * 3 and not polls and not checks   # 2 busy
        d.calls.clear()
        a[:] = 0
        offload.target_update(from_=[a[256:512]], device=0)     # a section inside it
        assert d.calls[1] == ("copy", a.ctypes.data + 1024, tgt + 1024, 1024, 0x51)
        assert (a[256:512] == np.arange(256, 512) + 5).all() and (a[:256] == 0).all()
        assert dev.generic.stats["to pinned"] >= a.nbytes
        d.busy_polls = -1                                   # outlasts the spin: Python polls
        offload.target_update(to=[a], device=0)
        assert polls == ["stream0"]
        assert [e.busy for e in dev.table.entries()] == [0]
        offload.target_exit_data(offload.delete(a), device=0)


def test_the_accelerator_reports_a_failed_copy_and_keeps_nothing_marked(accel_table,
                                                                        monkeypatch):
    d = Driver(op_rc=1)                                     # CUDA_ERROR_INVALID_VALUE
    dev, polls, checks = _start(accel_table, monkeypatch, d)
    a = np.arange(64, dtype=np.int32)
    with _pinned(a):
        with offload.target_data(offload.to(a), device=0):
            with pytest.raises(offload.OffloadError, match="cuMemcpyHtoDAsync failed: 1"):
                offload.target_update(to=[a], device=0)
            assert checks == [(1, "cuMemcpyHtoDAsync")]
            assert [e.busy for e in dev.table.entries()] == [0]
            d.op_rc = 0
            offload.target_update(to=[a], device=0)      # the stream went back: works
            assert d.calls[-2][0] == "copy" and d.calls[-2][4] == 0x51
        assert len(dev.table) == 0


def test_unpinned_or_absent_updates_leave_the_copier_alone(accel_table, monkeypatch):
    d = Driver()
    _start(accel_table, monkeypatch, d)
    a = np.arange(64, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):   # not pinned: the Python path
        a[:] = -1
        offload.target_update(from_=[a], device=0)
        assert (a == np.arange(64)).all()
    offload.target_update(to=[a], device=0)                # absent: skipped
    assert d.calls == []


def test_the_accelerator_launches_a_region_on_mapped_data_through_the_driver(accel_table,
                                                                             monkeypatch):
    """A region whose arrays are mapped goes to cuLaunchKernel in C (the stand-in records
    it instead of running the host kernel), its arguments translated and packed."""
    from offload.plugins.host import HostDevice
    d = Driver(busy_polls=1)
    specs = []

    def spec(self, kernel, teams, threads, shared_mem):
        specs.append((kernel.name, teams, threads, shared_mem))
        return LaunchSpec(0xF00, teams or 1, threads or 128, shared_mem, (8, 8), kernel.name,
                          f"cuLaunchKernel({kernel.name})")
    monkeypatch.setattr(HostDevice, "_accel_launch_impl", spec)
    monkeypatch.setattr(HostDevice, "accel_launches", True)
    dev, polls, checks = _start(accel_table, monkeypatch, d)
    k = offload.compile_c("void inc(int *a, long n) { for (long i = 0; i < n; ++i) a[i]++; }")
    a = np.zeros(16, dtype=np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        tgt = offload.omp_get_mapped_ptr(a, 0)
        d.calls.clear()
        offload.target(k.inc, a, a.size, device=0, teams=3, threads=64)
        assert d.calls[0] == ("ctx", 0xC7)
        assert d.calls[1] == ("launch", 0xF00, 3, 1, 1, 64, 1, 1, 0, 0x51, tgt, True)
        assert d.calls[2:] == [("query",)] * 2 and not checks
        assert [e.busy for e in dev.table.entries()] == [0]
        d.op_rc = 719                                    # CUDA_ERROR_LAUNCH_FAILED
        with pytest.raises(offload.OffloadError, match="cuLaunchKernel"):
            offload.target(k.inc, a, a.size, device=0)
        assert checks == [(719, "cuLaunchKernel(inc)")]
        assert [e.busy for e in dev.table.entries()] == [0]
        d.op_rc = 0
        offload.target(k.inc, a, -1, device=0)          # negative: Python packs and runs
    assert (a == 0).all()                                # the host kernel never ran
    # the common layer keeps each geometry's spec: the vendor is asked once per geometry
    assert specs == [("inc", 3, 64, 0), ("inc", None, None, 0)]


def test_enqueue_then_spin_is_one_c_unit_in_a_c_file():
    """"Make the context current, enqueue, spin" is written once, in accel_c/cuda_work.c:
    the accelerator includes it and the helper compiles it first; no module of offload
    holds C source in a Python string."""
    import pathlib
    root = pathlib.Path(offload.__file__).parent
    unit = (root / "accel_c" / "cuda_work.c").read_text()
    assert _cuda_fast.source().startswith(unit)
    assert '#include "cuda_work.c"' in (root / "accel_c" / "accel.c").read_text()
    sources = [*root.rglob("*.c"), *root.rglob("*.py")]
    spins = [p.name for p in sources if "== CU_NOT_READY && seconds()" in p.read_text()]
    assert spins == ["cuda_work.c"]
    in_python = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "#include <stdint.h>" in p.read_text()]
    assert in_python == [], f"C source held in Python strings: {in_python}"
