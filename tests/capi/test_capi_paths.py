"""Which path the drop-in's data constructs take (issue 29/26: one eligibility rule,
maps.single_section): one plain array section goes to the table's fewer-steps methods
(begin_single_range / end_single_range / update_single_range, in C with the compiled core); anything else to
the general rules. Asserted by counting the calls, in-process through the exports'
bodies, with and without the compiled core (whose fewer-steps methods hand what they
do not take, absent data for one, to the general rules themselves)."""
import ctypes
import os

import numpy as np
import pytest

import offload
from offload.capi import abi
from tests.capi_support import LLVM_LIB, WHY, ours  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")
TO, FROM, PRESENT, ALWAYS = 0x1, 0x2, 0x1000, 0x4
_P = ctypes.POINTER(ctypes.c_void_p)
_I = ctypes.POINTER(ctypes.c_int64)


def _construct(lib, kind, a, t, dev=0, begin=None):
    """The data construct through the library's own export (its C body, then the
    runtime), in this process: the library shares this program's runtime."""
    p = a.ctypes.data if begin is None else begin
    fn = getattr(lib, f"__tgt_target_data_{kind}_mapper")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, _P, _P, _I, _I,
                   ctypes.c_void_p, ctypes.c_void_p]
    bases, begins = (ctypes.c_void_p * 1)(a.ctypes.data), (ctypes.c_void_p * 1)(p)
    sizes = (ctypes.c_int64 * 1)(a.nbytes - (p - a.ctypes.data))
    types = (ctypes.c_int64 * 1)(t)
    fn(None, dev, 1, bases, begins, sizes, types, None, None)


@pytest.fixture
def spied(runtime, monkeypatch, ours):  # noqa: F811
    runtime()
    ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(ours, abi.SONAME), mode=ctypes.RTLD_GLOBAL)
    table = offload.runtime.current().device(0).table
    calls = {}

    def spy(name):
        step = name in table.steps._fields            # a step: the compiled core's or ours
        real = getattr(table.steps if step else table, name)

        def counted(*args, **kw):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kw)
        if step:
            monkeypatch.setattr(table, "steps", table.steps._replace(**{name: counted}))
        else:
            monkeypatch.setattr(table, name, counted)
    for name in ("begin_single_range", "end_single_range", "update_single_range", "target_data_begin",
                 "target_data_end", "target_data_update"):
        spy(name)
    return table, calls, lambda *args, **kw: _construct(lib, *args, **kw)


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
        _construct(lib, "begin", a, TO)
        a += 1
        _construct(lib, "update", a, TO)
        _construct(lib, "end", a, FROM)
    assert (a == np.arange(1000) + 4).all()
    if compiled:          # the first begin finds no pooled block: Python allocates it
        assert calls == {"begin": 1, "end": 0}, calls
    else:
        assert calls == {"begin": 4, "end": 4}, calls


REGIONS = r'''
void bump(int *a) {
#pragma omp target map(tofrom: a[0:1000])
  a[0] += 1;
}
int empty(void) {
  int on_host = 1;
#pragma omp target map(from: on_host)
  on_host = 0;
  return on_host;
}
'''


@pytest.mark.parametrize("watch", [None, "info", "traced"])
def test_regions_of_one_plain_section_through_the_c_body(spied, watch, monkeypatch):
    """A region whose map list is one plain section (its fields read by the C body,
    kernel_one: the C arrays are never decoded in Python) maps it in fewer steps and runs;
    on an observed table it takes the general rules (which print and report); either way
    the result is the same."""
    from offload.capi import maps
    table, calls, _ = spied
    decode = maps.decode

    def counted(*args, **kw):
        calls["decode"] = calls.get("decode", 0) + 1
        return decode(*args, **kw)
    monkeypatch.setattr(maps, "decode", counted)
    if watch == "info":
        table.info = 0x20
    elif watch == "traced":
        table.traced = True
    m = offload.compile_openmp(REGIONS)
    a = np.zeros(1000, dtype=np.int32)
    for _ in range(3):
        m.bump(a)
    assert a[0] == 3 and not a[1:].any()
    assert m.empty() == 0                        # ran on the device, not the host fallback
    fewer = (calls.get("begin_single_range", 0), calls.get("end_single_range", 0))
    general = (calls.get("target_data_begin", 0), calls.get("target_data_end", 0))
    if watch is None:
        assert fewer == (4, 4) and general == (0, 0) and "decode" not in calls, calls
    else:
        assert fewer == (0, 0) and general == (4, 4) and calls["decode"] == 4, calls
    assert len(table) == 0
