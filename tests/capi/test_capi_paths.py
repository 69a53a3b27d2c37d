"""Which path the drop-in's data constructs take (issue 29/26: one eligibility rule,
maps.single_section): one plain array section goes to the table's fewer-steps methods
(begin_single_range / end_single_range / update_single_range, in C with the compiled
core); anything else to the general rules. Asserted by counting the calls, in-process
through the exports' bodies, with and without the compiled core (whose fewer-steps methods
hand what they do not take, absent data for one, to the general rules themselves). Kernel
regions: test_capi_region_paths.py."""
import ctypes
import os

import numpy as np
import pytest

import offload
from offload.capi import abi
from tests.capi_support import LLVM_LIB, WHY, ours  # noqa: F401 - fixture
from tests.capi_support import construct as through_export
from tests.capi_support import count as _count

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")
TO, FROM, PRESENT, ALWAYS = 0x1, 0x2, 0x1000, 0x4


def _device_copy(table, a):
    e = table.lookup(a.ctypes.data, a.nbytes)
    out = np.empty_like(a)
    offload.omp_target_memcpy(out, e.tgt_begin, a.nbytes, 0, 0,
                              offload.omp_get_initial_device(), 0)
    return out


def test_one_plain_section_takes_the_fewer_steps_methods(spied):
    table, calls, _construct = spied
    a = np.arange(1000, dtype=np.int32)
    _construct("begin", a, TO)
    a += 1
    _construct("update", a, TO)
    assert (_device_copy(table, a) == a).all()          # the update was made
    a[:] = 0
    _construct("update", a, FROM)
    assert (a == np.arange(1000) + 1).all()
    _construct("end", a, FROM)
    plain = {k: calls.get(k, 0) for k in ("begin_single_range", "update_single_range", "end_single_range")}
    assert plain == {"begin_single_range": 1, "update_single_range": 2, "end_single_range": 1}, calls
    assert table.lookup(a.ctypes.data, a.nbytes) is None


@pytest.mark.parametrize("t, why", [(TO | PRESENT, "present"), (TO | FROM, "both ways"),
                                    (TO | ALWAYS, "always")])
def test_other_updates_take_the_general_rules(spied, t, why):
    table, calls, _construct = spied
    a = np.arange(1000, dtype=np.int32)
    _construct("begin", a, TO)
    a += 1
    _construct("update", a, t)
    assert (_device_copy(table, a) == a).all(), why
    _construct("end", a, 0)
    assert calls.get("update_single_range", 0) == 0 and calls["target_data_update"] == 1, calls


def test_a_section_not_from_its_base_takes_the_general_rules(spied):
    table, calls, _construct = spied
    a = np.arange(1000, dtype=np.int32)
    _construct("begin", a, TO)
    a += 1
    _construct("update", a, TO, begin=a.ctypes.data + 400)     # a[100:]
    back = _device_copy(table, a)
    assert (back[100:] == a[100:]).all() and (back[:100] == a[:100] - 1).all()
    _construct("end", a, 0)
    assert calls.get("update_single_range", 0) == 0 and calls["target_data_update"] == 1, calls


def test_an_absent_array_is_skipped_by_either_path(spied):
    table, calls, _construct = spied
    a = np.arange(10, dtype=np.int32)
    _construct("update", a, TO)                        # nothing mapped: nothing done
    assert calls["update_single_range"] == 1 and len(table) == 0


@pytest.mark.parametrize("watch", ["info", "traced"])
def test_an_observed_table_takes_the_general_rules(spied, watch):
    """LIBOMPTARGET_INFO bits or a listener (table.observed): the fewer-steps methods tell
    no one, so the C body's one component goes to the general rules."""
    table, calls, _construct = spied
    if watch == "info":
        table.info = 0x20                         # LIBOMPTARGET_INFO: DATA_TRANSFER (prints)
    else:
        table.traced = True
    a = np.arange(1000, dtype=np.int32)
    _construct("begin", a, TO)
    a += 1
    _construct("update", a, TO)
    assert (_device_copy(table, a) == a).all()
    _construct("end", a, FROM)
    assert not any(calls.get(k) for k in ("begin_single_range", "update_single_range", "end_single_range")), calls
    assert (calls["target_data_begin"], calls["target_data_update"],
            calls["target_data_end"]) == (1, 1, 1), calls


def test_the_compiled_core_keeps_the_plain_section_in_c(runtime, monkeypatch, ours):  # noqa: F811
    """Through the C bodies with the compiled core, a warm plain section never reaches the
    Python methods (a fallback that silently takes every call fails here: the core's
    table-level test once read a bool where it wanted an int); with the pure-Python core
    every call is a Python one."""
    from offload import _accel
    from tests.single_range_support import _counting
    calls = _counting(monkeypatch)                 # tables made after this are counted
    runtime()
    compiled = _accel.load() is not None and offload.runtime.current().config.accel
    ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(ours, abi.SONAME), mode=ctypes.RTLD_GLOBAL)
    a = np.arange(1000, dtype=np.int32)
    for _ in range(4):
        through_export(lib, "begin", a, TO)
        a += 1
        through_export(lib, "update", a, TO)
        through_export(lib, "end", a, FROM)
    assert (a == np.arange(1000) + 4).all()
    if compiled:          # the first begin finds no pooled block: Python allocates it
        assert calls == {"begin": 1, "end": 0}, calls
    else:
        assert calls == {"begin": 4, "end": 4}, calls




def test_an_update_of_nothing_is_done_in_the_c_body_step(spied, monkeypatch):
    """`update from(a[0:0])` (BabelStream's wait after each kernel) moves nothing and
    checks nothing: data_one finishes it (maps.empty_update: the table's skips_update)
    without decoding the list or reaching the table; with `present` the general rules
    check that a mapping holds it (LLVM's zero-length lookup: no error here)."""
    from offload.capi import maps
    table, calls, _construct = spied
    _count(monkeypatch, calls, maps, "decode")
    a = np.arange(1000, dtype=np.int32)
    _construct("begin", a, TO)
    a[:] = 0
    inside = a.ctypes.data + 400
    _construct("update", a, FROM, begin=inside, size=0)     # a[100:0]
    assert not any(calls.get(k) for k in ("decode", "target_data_update",
                                          "update_single_range")), calls
    _construct("update", a, FROM | PRESENT, begin=inside, size=0)
    assert calls["decode"] == 1 and calls["target_data_update"] == 1, calls
    assert not a.any()                                      # nothing came back
    _construct("end", a, 0)
    assert len(table) == 0
