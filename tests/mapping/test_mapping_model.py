"""The mapping table against a model, step by step (hypothesis' state machine)."""
import threading

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import offload
from offload import ErrorCode, MapType, OffloadError
from tests.harness import run_threads
from tests.mapping_support import allocs, device_view, table

# ---- the model-checked state machine ------------------------------------------------------
N = 64
# non-empty: numpy gives an empty slice a[i:i] the address of a[0], not of a[i]
sections = st.tuples(st.integers(0, N), st.integers(0, N)).filter(lambda s: s[0] != s[1]).map(sorted)


class MappingMachine(RuleBasedStateMachine):
    """enter / exit / update / kernel on overlapping sections vs a model of counts and data."""

    def __init__(self):
        super().__init__()
        offload.shutdown()
        import os
        os.environ["OFFLOAD_PLUGINS"] = "host"
        self.kern = offload.compile_c(
            "void add_one(int *a, long lo, long hi) { for (long i = lo; i < hi; ++i) a[i] += 1; }")
        self.a = np.arange(N, dtype=np.int32)
        self.host = self.a.copy()
        self.entries = []            # [lo, hi, dyn, hold, device data (np array)]

    def teardown(self):
        offload.shutdown()
        import os
        os.environ.pop("OFFLOAD_PLUGINS")

    def _find(self, lo, hi):
        return [e for e in self.entries if e[0] < max(hi, lo + 1) and lo < e[1]]

    @rule(sec=sections, to=st.booleans(), always=st.booleans(), hold=st.booleans())
    def enter(self, sec, to, always, hold):
        lo, hi = sec
        clause = (offload.to if to else offload.alloc)(self.a[lo:hi], always=always, hold=hold)
        ov = self._find(lo, hi)
        inside = len(ov) == 1 and ov[0][0] <= lo and hi <= ov[0][1]
        if ov and not inside and hi > lo:
            with pytest.raises(OffloadError, match="explicit extension"):
                offload.target_enter_data(clause, device=0)
            return
        if not to and not inside and hi > lo:
            return                   # would leave device data undefined in the model
        offload.target_enter_data(clause, device=0)
        if hi == lo and not inside:
            return
        if inside:
            e = ov[0]
            e[3 if hold else 2] += 1
            if to and always:
                e[4][lo - e[0]:hi - e[0]] = self.host[lo:hi]
        else:
            self.entries.append([lo, hi, 0 if hold else 1, 1 if hold else 0,
                                 self.host[lo:hi].copy()])

    @rule(sec=sections, frm=st.booleans(), always=st.booleans(), dele=st.booleans(),
          hold=st.booleans())
    def exit(self, sec, frm, always, dele, hold):
        lo, hi = sec
        make = offload.delete if dele else (offload.from_ if frm else offload.release)
        offload.target_exit_data(make(self.a[lo:hi], always=always, hold=hold), device=0)
        ov = self._find(lo, hi)
        if hi == lo or not (len(ov) == 1 and ov[0][0] <= lo and hi <= ov[0][1]):
            return
        e = ov[0]
        if dele:
            e[2] = 0
        elif hold:
            e[3] = max(0, e[3] - 1)
        else:
            e[2] = max(0, e[2] - 1)
        last = e[2] + e[3] == 0
        if frm and not dele and (always or last):
            self.host[lo:hi] = e[4][lo - e[0]:hi - e[0]]
        if last:
            self.entries.remove(e)

    @rule(sec=sections, to=st.booleans())
    def update(self, sec, to):
        lo, hi = sec
        if to:
            offload.target_update(to=[self.a[lo:hi]], device=0)
        else:
            offload.target_update(from_=[self.a[lo:hi]], device=0)
        ov = self._find(lo, hi)
        if hi > lo and len(ov) == 1 and ov[0][0] <= lo and hi <= ov[0][1]:
            e = ov[0]
            if to:
                e[4][lo - e[0]:hi - e[0]] = self.host[lo:hi]
            else:
                self.host[lo:hi] = e[4][lo - e[0]:hi - e[0]]

    @rule(i=st.integers(0, 10), data=st.data())
    def kernel(self, i, data):
        if not self.entries:
            return
        e = self.entries[i % len(self.entries)]
        lo = data.draw(st.integers(e[0], e[1] - 1))
        hi = data.draw(st.integers(lo + 1, e[1]))
        offload.target(self.kern.add_one, self.a, lo, hi, device=0,
                       map=[offload.tofrom(self.a[lo:hi], present=True)])
        e[4][lo - e[0]:hi - e[0]] += 1

    @rule(i=st.integers(0, N - 1), v=st.integers(-100, 100))
    def host_write(self, i, v):
        self.a[i] = v
        self.host[i] = v

    @invariant()
    def matches_model(self):
        got = sorted((e.hst_begin, e.hst_end, e.dyn, e.hold) for e in table().entries())
        base = self.a.ctypes.data
        want = sorted((base + 4 * lo, base + 4 * hi, dyn, hold)
                      for lo, hi, dyn, hold, _ in self.entries)
        assert got == want
        np.testing.assert_array_equal(self.a, self.host)
        for lo, hi, _, _, data in self.entries:
            np.testing.assert_array_equal(device_view(self.a[lo:hi]), data)


TestMappingMachine = MappingMachine.TestCase
TestMappingMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_waiter_on_a_failing_new_entry_starts_over(rt, monkeypatch):
    """A mapping whose allocation fails while another thread waits on it: the waiter
    retries and maps for itself; nothing is left of the failed entry."""
    import time
    generic = offload.runtime.current().manager.get_device(0).generic
    real = generic.alloc
    calls = []

    def slow_then_fail(n, kind):
        calls.append(n)
        if len(calls) == 1:
            time.sleep(0.2)
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "injected allocation failure")
        return real(n, kind)

    monkeypatch.setattr(generic, "alloc", slow_then_fail)
    a = np.arange(100, dtype=np.int32)
    errors = []

    def first():
        try:
            offload.target_enter_data(offload.to(a), device=0)
        except OffloadError as exc:
            errors.append(exc)

    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.05)
    offload.target_enter_data(offload.to(a), device=0)      # waits, then maps itself
    t.join()
    assert len(errors) == 1 and "injected" in str(errors[0])
    e = table().lookup(a.ctypes.data, a.nbytes)
    assert e.dyn == 1 and len(table()) == 1
    np.testing.assert_array_equal(device_view(a), np.arange(100))
    offload.target_exit_data(offload.release(a), device=0)
    assert len(table()) == 0 and allocs() == 0


def test_many_threads_map_one_array(rt, add_one):
    a = np.zeros(4096, np.int32)

    def work():
        for _ in range(300):
            offload.target_enter_data(offload.to(a), device=0)
            offload.target_exit_data(offload.release(a), device=0)

    run_threads(work, [()] * 8)
    assert len(table()) == 0 and allocs() == 0


def test_an_implicit_unmap_meeting_a_smaller_mapping_copies_back_only_what_it_holds(runtime):
    """A region's implicit tofrom of a whole array, whose mapping another construct
    released meanwhile while a part of the array was mapped again: the region's end finds
    the smaller mapping (as LLVM's lookup does for implicit items) and copies back only
    the bytes that mapping holds, not the whole array out of a smaller allocation (that
    read past the allocation and wrote what lay beyond into the rest of the array)."""
    import ctypes

    from offload.clauses import MapClause
    runtime()
    table = offload.runtime.current().device(0).table
    a = np.arange(1000, 1256, dtype=np.int32)
    region = [MapClause(a, MapType.TO | MapType.FROM | MapType.IMPLICIT).item()]
    table.target_data_begin(region)                                  # the region's map
    offload.target_exit_data(offload.release(a), device=0)          # another construct
    offload.target_enter_data(offload.alloc(a[:16]), device=0)      # a part, mapped again
    small = table.entries()
    assert [(e.hst_begin, e.size) for e in small] == [(a.ctypes.data, 64)]
    ctypes.memmove(small[0].tgt_begin, np.full(16, -7, np.int32).ctypes.data, 64)
    table.target_data_end(region)                                    # the region's unmap
    assert (a[:16] == -7).all()
    assert (a[16:] == np.arange(1016, 1256)).all()
    assert len(table) == 0
