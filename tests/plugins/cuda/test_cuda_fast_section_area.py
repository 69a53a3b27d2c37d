"""A reducing region's section in the taken copier stream's own area, right after its launch
environment (accel_c/section.c with a ReductionScratch that has `section` bytes): one send
writes the counters, the buffer's address and the section's bytes; no memset, no pooled
block, nothing to free. On the stand-in driver (tests/fakes/cuda_driver.py); the rest of
the one-pass path is in test_cuda_fast_section.py."""
import numpy as np
import pytest

from offload.plugins.accel_specs import OmpLaunchPlan
from tests.fakes.cuda_driver import Driver
from tests.plugins.cuda.test_cuda_fast import accel_table  # noqa: F401
from tests.plugins.cuda.test_cuda_fast_section import (
    AREA,
    SPEC,
    Setup,
    _add_to_the_scalar,
    _scratch_for,
    reduce_from_four_threads,
)


def test_a_reducing_regions_section_goes_after_the_streams_environment_in_one_send(
        accel_table, monkeypatch):
    """With room after the taken stream's launch environment, the section goes there: one
    send writes the counters (0), the buffer's address and the section's bytes; no memset,
    no pooled block, nothing to free after; the bytes come back from there."""
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    scratch = _scratch_for(st, AREA)
    s = np.array([1.5])
    live, hits = st.g.live_allocations(), st.g.stats["pool hits"]
    d.kernel = _add_to_the_scalar(5.0)
    env, bounce = scratch.environments[0], st.bounces[0].ctypes.data
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0, scratch) is True
    assert d.calls[:4] == [("ctx", 0xC7), ("copy", env, bounce, 24, 0x51),
                           ("launch", 0xF00, 32, 1, 1, 32, 1, 1, 0, 0x51, env, True),
                           ("copy", bounce + 16, env + 16, 8, 0x51)]
    assert d.calls[4:] == [("query",)] and not st.checks
    block = st.blocks[0]
    assert not block[64:72].any()                                       # the counters
    assert int.from_bytes(block[72:80].tobytes(), "little") == scratch.buffers[0]
    assert (block[:64] == 0xAB).all() and (st.blocks[1] == 0xAB).all()  # as they were
    assert s[0] == 6.5
    st.only_the_array_left()
    assert st.g.live_allocations() == live and st.g.stats["pool hits"] == hits
    assert st.g.stats["from staged"] == st.g.stats["to staged"] == 8


def test_an_interrupted_wait_in_the_streams_area_keeps_that_stream_out(accel_table,
                                                                       monkeypatch):
    def poll(stream):
        raise KeyboardInterrupt
    d = Driver(busy_polls=-1)
    st = Setup(accel_table, monkeypatch, d, poll=poll)
    scratch = _scratch_for(st, AREA)
    s = np.array([3.0])
    with pytest.raises(KeyboardInterrupt):
        st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0, scratch)
    assert s[0] == 3.0
    st.only_the_array_left()
    d.busy_polls, d.calls[:] = 0, []
    d.kernel = _add_to_the_scalar(1.0)
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0, scratch) is True
    assert d.calls[1] == ("copy", scratch.environments[1], st.bounces[1].ctypes.data, 24, 0x52)
    assert s[0] == 4.0


def test_threads_reducing_through_the_streams_areas_each_get_every_update(accel_table,
                                                                        monkeypatch):
    """Four threads on two streams: a region finds a stream's area, or (both taken) a
    pooled block, or maps its section in Python; every sum right, nothing left."""
    st = Setup(accel_table, monkeypatch, Driver())
    st.pool_block()
    reduce_from_four_threads(st, OmpLaunchPlan(SPEC, 0, _scratch_for(st, AREA)))
