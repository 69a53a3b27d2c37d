"""Construct objects entered more than once (tests/runtime concept: one
construct object, several entries). A `target_data` entered again while entered acts as
a nested construct (each exit ends its own entry); entered again after its exit, it maps
again; exited more often than entered, it says so."""
import threading

import numpy as np
import pytest

import offload
from offload.testing import state


def test_a_target_data_entered_twice_acts_as_two_nested_constructs(rt, add_one):
    b = np.zeros(8, dtype=np.int32)
    td = offload.target_data(offload.tofrom(b), device=0)
    with td:
        with td:
            offload.target(add_one.add_one, b, 0, 8, device=0)
        assert offload.omp_target_is_present(b, 0) == 1     # the outer entry holds it
        assert (b == 0).all()                               # not copied back yet
    assert (b == 1).all()
    assert state()["devices"][0]["mappings"] == 0


def test_a_target_data_entered_again_after_its_exit_maps_again(rt, add_one):
    b = np.zeros(8, dtype=np.int32)
    td = offload.target_data(offload.tofrom(b), device=0, use_device_ptr=[b])
    for n in (1, 2, 3):
        with td as d:
            assert d[b] != b.ctypes.data          # the device copy's address
            offload.target(add_one.add_one, b, 0, 8, device=0)
        assert (b == n).all()
    assert state()["devices"][0]["mappings"] == 0
    with pytest.raises(offload.OffloadError, match="inside `with target_data"):
        td[b]


def test_one_target_data_entered_from_two_threads(rt, add_one):
    """Each thread's exit ends that thread's own entry."""
    b = np.zeros(1024, dtype=np.int32)
    td = offload.target_data(offload.tofrom(b), device=0)
    inside, leave = threading.Barrier(2), threading.Event()
    errors = []

    def body():
        try:
            with td:
                inside.wait(30)
                leave.wait(30)
        except BaseException as exc:                       # reported below
            errors.append(exc)
    ts = [threading.Thread(target=body) for _ in range(2)]
    for t in ts:
        t.start()
    leave.set()
    for t in ts:
        t.join(60)
    assert not errors and state()["devices"][0]["mappings"] == 0


def test_exiting_a_target_data_never_entered_is_an_error(rt):
    td = offload.target_data(offload.tofrom(np.zeros(4)), device=0)
    with pytest.raises(offload.OffloadError, match="exited more often than entered"):
        td.__exit__(None, None, None)
