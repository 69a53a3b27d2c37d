"""PinnedMap against a reference model (SEMANTICS.md §1), with a fake pin driver
(tests/fakes/pin_driver.py)."""
import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from offload.errors import ErrorCode, OffloadError
from offload.pinned import Kind, PinnedMap
from tests.fakes.pin_driver import FakeDriver


class Model:
    """The ~30-line reference: entries [start, end) with per-device counts."""

    def __init__(self):
        self.entries = []          # dicts: start, end, counts

    def find(self, p, n):
        return [e for e in self.entries if e["start"] < p + n and p < e["end"]]

    def lock(self, p, n, d):
        if n <= 0:
            return ErrorCode.INVALID_VALUE
        if p == 0:
            return ErrorCode.INVALID_ARGUMENT
        ov = self.find(p, n)
        if len(ov) == 1 and ov[0]["start"] <= p and p + n <= ov[0]["end"]:
            ov[0]["counts"][d] = ov[0]["counts"].get(d, 0) + 1
            return None
        if ov:
            return ErrorCode.INVALID_ARGUMENT
        self.entries.append({"start": p, "end": p + n, "counts": {d: 1}})
        return None

    def unlock(self, p, d):
        ov = self.find(p, 1)
        if not ov or d not in ov[0]["counts"]:
            return ErrorCode.NOT_FOUND
        e = ov[0]
        e["counts"][d] -= 1
        if e["counts"][d] == 0:
            del e["counts"][d]
            if not e["counts"]:
                self.entries.remove(e)
        return None


addrs = st.integers(min_value=0, max_value=300)
sizes = st.integers(min_value=-2, max_value=60)
devices = st.integers(min_value=0, max_value=2)


class PinnedMapMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.map = PinnedMap()
        self.drv = FakeDriver()
        self.model = Model()

    def _check(self, expected, fn):
        try:
            fn()
        except OffloadError as exc:
            assert expected is exc.code, (expected, exc)
            return False
        assert expected is None
        return True

    @rule(p=addrs, n=sizes, d=devices)
    def lock(self, p, n, d):
        before = len(self.drv.calls)
        expected = self.model.lock(p, n, d)
        ok = self._check(expected, lambda: self.map.acquire(self.drv, p, n, d))
        if not ok:
            assert len(self.drv.calls) == before, "no driver call on a rejected lock"

    @rule(p=addrs, d=devices)
    def unlock(self, p, d):
        before = len(self.drv.calls)
        expected = self.model.unlock(p, d)
        ok = self._check(expected, lambda: self.map.release(self.drv, p, d))
        if not ok:
            assert len(self.drv.calls) == before

    @rule(p=addrs, n=st.integers(1, 60), d=devices)
    def notify_mapped(self, p, n, d):
        """A mapping inside an entry shares its counter; elsewhere it pins nothing."""
        ov = self.model.find(p, n)
        inside = len(ov) == 1 and ov[0]["start"] <= p and p + n <= ov[0]["end"]
        got = self.map.acquire(self.drv, p, n, d, kind=Kind.MAPPED, create=False,
                               partial_ok=True) if p else None
        if inside and p:
            self.model.lock(p, n, d)
            assert got is not None
        else:
            assert got is None

    @rule(p=addrs, n=st.integers(1, 60), d=devices)
    def failing_pin_leaves_nothing(self, p, n, d):
        if p == 0 or self.model.find(p, n):
            return
        self.drv.fail_next = True
        with pytest.raises(OffloadError):
            self.map.acquire(self.drv, p, n, d)
        self.drv.fail_next = False

    @invariant()
    def same_entries(self):
        got = sorted((e.host, e.end, dict(e.count)) for e in self.map.entries())
        want = sorted((e["start"], e["end"], e["counts"]) for e in self.model.entries)
        assert got == want

    @invariant()
    def driver_pins_match(self):
        want = {}
        for e in self.model.entries:
            want[(e["start"], e["end"] - e["start"])] = set(e["counts"])
        assert self.drv.pinned == want


TestPinnedMapMachine = PinnedMapMachine.TestCase
TestPinnedMapMachine.settings = settings(max_examples=150, stateful_step_count=40,
                                         deadline=None)


def test_interior_pointer_translates_to_device_base_plus_offset():
    m, drv = PinnedMap(), FakeDriver()
    base = m.acquire(drv, 1000, 100, 0)
    assert m.acquire(drv, 1040, 10, 0) == base + 40
    assert m.translate(990, 120, 0) == [(0, 10, None), (10, 100, base), (110, 10, None)]
    m.release(drv, 1045, 0)          # any interior address unlocks
    m.release(drv, 1000, 0)
    assert len(m) == 0


def test_external_registration_is_recorded_and_never_unpinned():
    drv = FakeDriver(external=[(5000, 1000)])
    m = PinnedMap()
    addr = m.acquire(drv, 5100, 50, 0)
    assert addr == 5000 + 0x7000_0000 + 100
    (e,) = m.entries()
    assert e.kind is Kind.EXTERNAL and (e.host, e.size) == (5000, 1000)
    m.release(drv, 5100, 0)
    assert len(m) == 0
    assert not [c for c in drv.calls if c[0] in ("pin", "unpin")]


def test_alloc_host_entry_keeps_its_allocation_reference():
    m, drv = PinnedMap(), FakeDriver()
    m.insert_allocated(8000, 4096, 0, 8000)
    assert m.acquire(drv, 8000, 64, 0) == 8000
    m.release(drv, 8000, 0)
    with pytest.raises(OffloadError) as ei:
        m.release(drv, 8000, 0)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    assert m.lookup(8000) is not None            # memory still registered and usable
    assert m.remove_allocated(8000) is not None
    assert len(m) == 0


def test_pending_pin_is_visible_and_not_duplicated():
    """Two threads locking one new range: one driver pin, two references."""
    gate = threading.Event()
    entered = threading.Event()

    class Slow(FakeDriver):
        def pin(self, *a, **k):
            entered.set()
            gate.wait(5)
            return super().pin(*a, **k)

    m, drv = PinnedMap(), Slow()
    results = []
    t1 = threading.Thread(target=lambda: results.append(m.acquire(drv, 100, 50, 0)))
    t1.start()
    entered.wait(5)
    # a lookup of another range does not wait for the pin in flight
    assert m.acquire(FakeDriver(), 1000, 10, 0) is not None
    t2 = threading.Thread(target=lambda: results.append(m.acquire(drv, 110, 10, 0)))
    t2.start()
    t2.join(0.2)
    assert t2.is_alive(), "the overlapping request waits for the pending entry"
    gate.set()
    t1.join()
    t2.join()
    assert len([c for c in drv.calls if c[0] == "pin"]) == 1
    e = m.lookup(100)
    assert e.count == {0: 2}
