"""A kept Dot-shaped region (arrays mapped, its scalar mapped nowhere) run through the
library's entry for kept regions (offload/accel_c/hot.c) as the library's C body calls
it, on the stand-in driver (tests/fakes/cuda_driver.py): the step kept for a CUDA device
(launch_present_map on its plan, as an operation) makes the section, launches and
brings it back in one wait, exactly as launch_present_map called from Python; a failing
launch reaches `failed` as the driver's OffloadError with nothing left in the table.
(tests/capi/test_capi_gpu.py runs BabelStream's shape on a GPU.)"""

import numpy as np
import pytest

import offload
from offload import _accel, profile
from offload.capi import hot_regions, ompt
from offload.capi.devices import registry
from tests.capi.test_capi_kept_entry import ENTRY
from tests.fakes.cuda_driver import Driver, ffi
from tests.plugins.cuda.test_cuda_fast import accel_table  # noqa: F401
from tests.plugins.cuda.test_cuda_fast_section import SPEC, Setup, _add_to_the_scalar

GENERAL = 7
KEY = (0, 0x4000, 0, 0, 1024)              # device, region, teams, threads, trip count


@pytest.fixture
def kept(accel_table, monkeypatch):  # noqa: F811 - the fixture above
    """(entry(st, s) -> the export's answer, the stand-in driver's Setup maker, failures)."""
    core = _accel.load()
    failures = []

    def failed(loc, export, exc):
        failures.append((loc, export, exc))
        return -1
    core.hot_setup(offload.runtime._process, registry, ompt, profile, set(), failed, GENERAL,
                   failed, b"beu")
    entry = ENTRY(core.hot_address())

    def keep_and_launch(st, s, first=7):
        steps = st.table.steps
        core.hot_keep(*KEY, offload.runtime.operation(steps.launch_present_map),
                      (SPEC, first, None), offload.runtime._process.live, st.g,
                      registry.version)
        n, *arrays = st.arrays(s)
        dev, region, teams, threads, trip = KEY
        return entry(0x55, 0, dev, teams, threads, region, trip, n, *arrays)
    yield keep_and_launch, failures
    core.hot_forget()
    if hot_regions._connected:
        core.hot_setup(*hot_regions._connected)


def test_a_kept_reduction_runs_in_one_pass_from_the_entry(accel_table, monkeypatch, kept):  # noqa: F811
    launch, failures = kept
    d = Driver(busy_polls=1)
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    s = np.array([1.5])
    d.kernel = _add_to_the_scalar(5.0)
    d.calls.clear()
    ran = _accel.load().hot_ran()
    assert launch(st, s) == 0
    assert [c[0] for c in d.calls] == ["ctx", "copy", "launch", "copy", "query", "query"]
    assert s[0] == 6.5 and not failures and _accel.load().hot_ran() == ran + 1
    st.only_the_array_left()
    assert st.g.pool._free[8] == [block]


def test_a_failed_kept_launch_is_the_exports_failure_with_nothing_left(accel_table,  # noqa: F811
                                                                      monkeypatch, kept):
    launch, failures = kept
    d = Driver(op_rc=719)                                  # CUDA_ERROR_LAUNCH_FAILED
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    s = np.array([3.0])
    assert launch(st, s) == -1
    [(loc, export, exc)] = failures
    assert (loc, export) == (0x55, 0) and isinstance(exc, offload.OffloadError)
    assert "cuLaunchKernel(dot) failed: 719" in str(exc)
    assert s[0] == 3.0
    st.only_the_array_left()
    assert st.g.pool._free[8] == [block]


def test_a_kept_region_whose_array_went_is_left_to_python(accel_table, monkeypatch, kept):  # noqa: F811
    """Its array unmapped: the step finds the list not on mapped data; the entry answers
    KERNEL_GENERAL with no driver call, so the library's Python path decides."""
    launch, failures = kept
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    st.pool_block()
    from offload.clauses import MapItem, MapType
    st.table.target_data_end([MapItem(st.a.ctypes.data, st.a.nbytes, MapType.FROM)])
    d.calls.clear()
    assert launch(st, np.array([1.0])) == GENERAL
    assert d.calls == [] and not failures and len(st.table) == 0


def test_a_kept_empty_region_launches_on_its_environment_alone(accel_table,  # noqa: F811
                                                               monkeypatch):
    """An empty region (no map list: n 0, the five arrays NULL) kept as kernel_one keeps
    it on a CUDA device (_keep_empty: launch_present_map on its plan) runs from the entry
    with one launch whose only argument is the launch environment, and one wait."""
    d = Driver(busy_polls=1)
    st = Setup(accel_table, monkeypatch, d)
    core = _accel.load()
    failures = []
    core.hot_setup(offload.runtime._process, registry, ompt, profile, set(),
                   lambda *f: failures.append(f) or -1, GENERAL,
                   lambda *f: failures.append(f) or -1, b"beu")
    try:
        spec = SPEC._replace(sizes=(8,), name="empty", what="cuLaunchKernel(empty)")
        core.hot_keep(*KEY, offload.runtime.operation(st.table.steps.launch_present_map),
                      (spec, 0x777, None), offload.runtime._process.live, st.g,
                      registry.version)
        seen = []
        d.kernel = lambda params: seen.append(ffi.cast("unsigned long long *", params[0])[0])
        dev, region, teams, threads, trip = KEY
        entry = ENTRY(core.hot_address())
        ran = core.hot_ran()
        for _ in range(2):
            d.calls.clear()
            d.busy_polls = 1                       # the launch still running at first
            assert entry(0x55, 0, dev, teams, threads, region, trip, 0, 0, 0, 0, 0, 0) == 0
            assert [c[0] for c in d.calls] == ["ctx", "launch", "query", "query"]
        assert seen == [0x777, 0x777] and core.hot_ran() == ran + 2 and not failures
        st.only_the_array_left()
    finally:
        core.hot_forget()
        if hot_regions._connected:
            core.hot_setup(*hot_regions._connected)
