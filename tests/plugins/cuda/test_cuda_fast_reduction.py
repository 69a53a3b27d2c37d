"""The accelerator's launch of an OpenMP kernel that reduces (launch_present_map with a
ReductionScratch: one launch environment and reduction buffer per copier stream), driven
through the stand-in driver (tests/fakes/cuda_driver.py) on a host table, so it runs without a GPU:
the taken stream's environment is the kernel's first argument, and its counters are set to
0 on that stream before the launch (LLVM 19 writes a fresh environment for every launch and
leaves its fresh buffer as allocated: the device runtime's first teams copy into it)."""
import contextlib
import ctypes

import numpy as np
import pytest

import offload
from offload.clauses import MapItem, MapType
from offload.plugins.accel_specs import LaunchSpec, ReductionScratch
from tests.fakes.cuda_driver import Driver
from tests.plugins.cuda.test_cuda_fast import _start, accel_table  # noqa: F401

SPEC = LaunchSpec(0xF00, 32, 32, 0, (8, 8), "dot", "cuLaunchKernel(dot)")
PARAM = 0x20                       # TARGET_PARAM


@contextlib.contextmanager
def _region(accel_table, monkeypatch, d):
    """(table, arrays, checks): a host table copying and launching through `d`, an array
    mapped on it, and launch_present_map's arrays for one zero-length pointer into it (a
    kernel argument); the array unmapped after, nothing left marked."""
    dev, polls, checks = _start(accel_table, monkeypatch, d)
    table = dev.table
    a = np.zeros(16, dtype=np.int64)
    p = a.ctypes.data
    table.target_data_begin([MapItem(p, a.nbytes, MapType.TO)])
    rows = [(ctypes.c_void_p * 1)(p), (ctypes.c_void_p * 1)(p), (ctypes.c_int64 * 1)(0),
            (ctypes.c_int64 * 1)(PARAM)]
    d.calls.clear()
    yield table, (1, *(ctypes.addressof(r) for r in rows), 0), checks
    assert [e.busy for e in table.entries()] == [0] and not polls
    table.target_data_end([MapItem(p, a.nbytes, MapType.FROM)])


def _scratch(streams=2, nbytes=64):
    """Host arrays standing in for each stream's environment and buffer, filled with junk
    (as a previous launch leaves them), and their ReductionScratch."""
    envs = [np.full(2, 0x0101010101010101, dtype=np.uint64) for _ in range(streams)]
    bufs = [np.full(nbytes, 0xAB, dtype=np.uint8) for _ in range(streams)]
    return envs, bufs, ReductionScratch(tuple(e.ctypes.data for e in envs),
                                        tuple(b.ctypes.data for b in bufs), nbytes)


def test_a_reducing_kernel_gets_its_streams_counters_zeroed_before_the_launch(accel_table,
                                                                              monkeypatch):
    d = Driver(busy_polls=1)
    envs, bufs, scratch = _scratch()
    with _region(accel_table, monkeypatch, d) as (table, arrays, checks):
        assert table.steps.launch_present_map(*arrays, SPEC, 0, scratch) is True
    env0 = envs[0].ctypes.data
    assert d.calls[:3] == [("ctx", 0xC7), ("memset", env0, 0, 8, 0x51),
                           ("launch", 0xF00, 32, 1, 1, 32, 1, 1, 0, 0x51, env0, True)]
    assert d.calls[3:] == [("query",)] * 2 and not checks
    assert envs[0][0] == 0 and envs[0][1] == 0x0101010101010101       # counters only
    assert (bufs[0] == 0xAB).all() and (envs[1] != 0).all()            # as left; stream 1's


def test_a_scratch_the_core_cannot_use_leaves_the_launch_to_python(accel_table, monkeypatch):
    """Fewer environments than the copier has streams, a malformed scratch, or a zero
    address: False (the caller launches), nothing marked, no driver call."""
    d = Driver()
    one, two = _scratch(streams=1), _scratch()
    with _region(accel_table, monkeypatch, d) as (table, arrays, _):
        for bad in (one[2], ("envs", "bufs", 8), two[2]._replace(buffers=(0, 0))):
            assert table.steps.launch_present_map(*arrays, SPEC, 0, bad) is False, bad
            assert [e.busy for e in table.entries()] == [0] and d.calls == []
        with pytest.raises(TypeError, match="ReductionScratch or None"):
            table.steps.launch_present_map(*arrays, SPEC, 0, None, None)


def test_a_failing_zero_reports_the_driver_error_and_marks_nothing(accel_table, monkeypatch):
    d = Driver()
    envs, bufs, scratch = _scratch()
    with _region(accel_table, monkeypatch, d) as (table, arrays, checks):
        d.memset_rc = 2                                   # CUDA_ERROR_OUT_OF_MEMORY
        with pytest.raises(offload.OffloadError, match="cuLaunchKernel\\(dot\\) failed: 2"):
            table.steps.launch_present_map(*arrays, SPEC, 0, scratch)
        assert not any(c[0] == "launch" for c in d.calls)    # stopped before the launch
        assert [e.busy for e in table.entries()] == [0] and checks == [(2, SPEC.what)]
        d.memset_rc, d.calls[:] = 0, []
        assert table.steps.launch_present_map(*arrays, SPEC, 0, scratch) is True
        assert d.calls[1][4] == 0x51                     # the stream went back

