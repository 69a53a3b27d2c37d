"""The compiled core's call_present_map (offload/accel_c/direct_call.c): a C-ABI region
whose kernel is called directly (the host), as the kept-region entry runs it. On mapped
data: marked, called, released. With one plain section mapped nowhere: the section mapped
around the call as Region.single_range maps it (copied in, the call, copied back, gone),
with no copy back when the call raises or the list is no longer on mapped data; a
component that is not a plain section comes back for the caller, nothing done."""
import ctypes

import numpy as np
import pytest

import offload
from offload.clauses import MapItem, MapType

PARAM, TO, FROM = 0x20, 0x1, 0x2


@pytest.fixture
def table(runtime):
    runtime(OFFLOAD_ACCEL="1")
    t = offload.runtime.current().device(0).table
    if t.steps.call_present_map is None:
        pytest.skip("no compiled core here (no C compiler): nothing is called in C")
    return t


def _arrays(rows, kept):
    n = len(rows)
    cols = [(ctypes.c_void_p * n)(*[r[0] for r in rows]),
            (ctypes.c_void_p * n)(*[r[1] for r in rows]),
            (ctypes.c_int64 * n)(*[r[2] for r in rows]),
            (ctypes.c_int64 * n)(*[r[3] for r in rows])]
    kept.append(cols)
    return (n, *(ctypes.addressof(c) for c in cols), 0)


def _add_one(calls):
    """A stand-in kernel on its device addresses: the first int64 of the last += 1."""
    def kernel(*args):
        calls.append(args)
        ctypes.c_int64.from_address(args[-1]).value += 1
    return kernel


def _mapped(table):
    a = np.arange(4, dtype=np.int64)
    table.target_data_begin([MapItem(a.ctypes.data, a.nbytes, MapType.TO)])
    return a, table.lookup(a.ctypes.data, a.nbytes)


def test_a_list_on_mapped_data_is_called_on_the_device_addresses(table):
    a, e = _mapped(table)
    calls, kept = [], []
    p = a.ctypes.data
    got = table.steps.call_present_map(*_arrays([(p, p, 0, PARAM)], kept), _add_one(calls), 1)
    assert got is True and calls == [(e.tgt_begin,)] and e.busy == 0
    assert a[0] == 0                                       # the device copy, not the host's


def test_a_section_mapped_nowhere_is_mapped_around_the_call(table):
    a, e = _mapped(table)
    s = np.array([10, 20], dtype=np.int64)
    calls, kept = [], []
    p, q = a.ctypes.data, s.ctypes.data
    rows = [(p, p, 0, PARAM), (q, q, s.nbytes, TO | FROM | PARAM)]
    got = table.steps.call_present_map(*_arrays(rows, kept), _add_one(calls), 2)
    assert got is True and len(calls) == 1 and calls[0][0] == e.tgt_begin
    assert calls[0][1] != q                                # a device copy of the section
    assert list(s) == [11, 20]                             # copied in, added to, back
    assert [x.hst_begin for x in table.entries()] == [p] and e.busy == 0


@pytest.mark.parametrize("t, back", [(TO | PARAM, False), (FROM | PARAM, True)])
def test_only_the_sections_own_directions_are_copied(table, t, back):
    a, _ = _mapped(table)
    s = np.array([5], dtype=np.int64)
    kept, seen = [], []

    def kernel(x, y):
        seen.append(ctypes.c_int64.from_address(y).value)
        ctypes.c_int64.from_address(y).value = 99
    p, q = a.ctypes.data, s.ctypes.data
    got = table.steps.call_present_map(*_arrays([(p, p, 0, PARAM), (q, q, 8, t)], kept),
                                       kernel, 2)
    assert got is True and (seen == [5]) == (t & TO != 0)
    assert s[0] == (99 if back else 5)


def test_a_call_that_raises_copies_nothing_back_and_unmaps_the_section(table):
    a, e = _mapped(table)
    s = np.array([1], dtype=np.int64)
    kept = []

    def kernel(x, y):
        ctypes.c_int64.from_address(y).value = 50
        raise RuntimeError("kernel failed")
    p, q = a.ctypes.data, s.ctypes.data
    with pytest.raises(RuntimeError, match="kernel failed"):
        table.steps.call_present_map(*_arrays([(p, p, 0, PARAM), (q, q, 8, TO | FROM | PARAM)],
                                              kept), kernel, 2)
    assert s[0] == 1 and [x.hst_begin for x in table.entries()] == [p] and e.busy == 0


def test_arguments_not_as_many_as_kept_map_and_unmap_with_nothing_called(table):
    a, e = _mapped(table)
    s = np.array([1], dtype=np.int64)
    calls, kept = [], []
    p, q = a.ctypes.data, s.ctypes.data
    got = table.steps.call_present_map(
        *_arrays([(p, p, 0, PARAM), (q, q, 8, TO | FROM | PARAM)], kept), _add_one(calls), 3)
    assert got is False and calls == [] and s[0] == 1
    assert [x.hst_begin for x in table.entries()] == [p] and e.busy == 0


@pytest.mark.parametrize("row", ["not from its base", "a bit besides TO/FROM/PARAM"])
def test_a_component_that_is_not_a_plain_section_comes_back_with_nothing_done(table, row):
    a, e = _mapped(table)
    s = np.array([1, 2], dtype=np.int64)
    calls, kept = [], []
    p, q = a.ctypes.data, s.ctypes.data
    other = (q, q + 8, 8, TO | PARAM) if row == "not from its base" else \
        (q, q, 16, TO | PARAM | 0x400)                     # close: not a plain section
    got = table.steps.call_present_map(*_arrays([(p, p, 0, PARAM), other], kept),
                                       _add_one(calls), 2)
    assert got == other and calls == []
    assert [x.hst_begin for x in table.entries()] == [p] and e.busy == 0


def test_malformed_calls_raise(table):
    with pytest.raises(TypeError, match="a callable, a count"):
        table.steps.call_present_map(0, 0, 0, 0, 0, 0, print)
    with pytest.raises(TypeError, match="a callable, a count"):
        table.steps.call_present_map(0, 0, 0, 0, 0, 0, print, -1)
