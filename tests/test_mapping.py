"""Issue 4: map clauses, reference counts, target regions, prelocked reuse."""
import threading

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import offload
from offload import ErrorCode, MapType, OffloadError
from tests.harness import run_threads

from .conftest import page_aligned, vmlck_kb


def table(dev=0):
    return offload.runtime.current().manager.get_device(dev).table


def allocs(dev=0):
    """Live device allocations of device `dev` (offload.testing.state())."""
    return offload.testing.state()["devices"].get(dev, {}).get("allocations", 0)


def device_view(a, dev=0):
    """The device copy of array a (host devices: device memory is readable memory)."""
    e = table(dev).lookup(a.ctypes.data, a.nbytes)
    tgt = e.tgt_begin + (a.ctypes.data - e.hst_begin)
    out = np.empty_like(a)
    assert offload.omp_target_memcpy(out, tgt, a.nbytes, 0, 0,
                                     offload.omp_get_initial_device(), dev) == 0
    return out


# ---- enter / exit rules ---------------------------------------------------------------
def test_first_map_copies_to_and_last_unmap_copies_back(rt, add_one):
    a = np.arange(100, dtype=np.int32)
    offload.target_enter_data(offload.to(a), device=0)
    e = table().lookup(a.ctypes.data, a.nbytes)
    assert e.dyn == 1 and e.hold == 0
    a[:] = -1                                        # host changes are not re-sent ...
    offload.target_enter_data(offload.to(a), device=0)
    assert e.dyn == 2
    np.testing.assert_array_equal(device_view(a), np.arange(100))
    offload.target_enter_data(offload.to(a, always=True), device=0)   # ... unless always
    np.testing.assert_array_equal(device_view(a), -1)
    offload.target(add_one.add_one, a, 0, 100, device=0)
    offload.target_exit_data(offload.from_(a), device=0)
    np.testing.assert_array_equal(a, -1)             # not the last reference: no copy
    offload.target_exit_data(offload.from_(a, always=True), device=0)
    np.testing.assert_array_equal(a, 0)              # always: copied
    a[:] = 5
    offload.target_exit_data(offload.from_(a), device=0)
    np.testing.assert_array_equal(a, 0)              # last reference: copied
    assert len(table()) == 0 and allocs() == 0


def test_section_inside_mapping_gets_entry_plus_offset(rt):
    a = np.zeros(100, np.int64)
    with offload.target_data(offload.tofrom(a), device=0):
        base = offload.omp_get_mapped_ptr(a, 0)
        with offload.target_data(offload.tofrom(a[10:20]), device=0):
            assert table().lookup(a[10:20].ctypes.data, 80).dyn == 2
            assert offload.omp_get_mapped_ptr(a[10:20], 0) == base + 80
    assert len(table()) == 0


def test_delete_forces_removal_and_hold_keeps_it(rt):
    a = np.ones(10)
    offload.target_enter_data(offload.to(a), device=0)
    offload.target_enter_data(offload.to(a), device=0)
    offload.target_exit_data(offload.delete(a), device=0)
    assert len(table()) == 0
    offload.target_enter_data(offload.to(a, hold=True), device=0)
    offload.target_enter_data(offload.to(a), device=0)
    offload.target_exit_data(offload.delete(a), device=0)
    assert table().lookup(a.ctypes.data, a.nbytes).hold == 1     # hold survives delete
    offload.target_exit_data(offload.release(a, hold=True), device=0)
    assert len(table()) == 0 and allocs() == 0


def test_explicit_extension_refused_implicit_allowed(rt):
    a = np.zeros(100, np.int32)
    with offload.target_data(offload.tofrom(a[10:20]), device=0):
        with pytest.raises(OffloadError) as ei:
            offload.target_enter_data(offload.to(a[5:30]), device=0)
        msg = str(ei.value)
        assert msg.startswith("explicit extension not allowed: host address specified is "
                              f"0x{a[5:].ctypes.data:x} (100 bytes), but device allocation "
                              f"maps to host at 0x{a[10:].ctypes.data:x} (40 bytes)")
        assert len(table()) == 1 and allocs() == 1
        implicit = offload.MapClause(a[5:30], MapType.TO | MapType.IMPLICIT)
        offload.target_enter_data(implicit, device=0)
        assert table().lookup(a[10:].ctypes.data, 40).dyn == 2
        offload.target_exit_data(offload.MapClause(a[5:30], MapType.IMPLICIT), device=0)


def test_present_on_absent_data(rt):
    a = np.zeros(10, np.int32)
    with pytest.raises(OffloadError) as ei:
        offload.target_enter_data(offload.to(a, present=True), device=0)
    assert str(ei.value).startswith(
        "device mapping required by 'present' map type modifier does not exist for host "
        f"address 0x{a.ctypes.data:x} (40 bytes)")
    with pytest.raises(OffloadError, match="'present' motion modifier"):
        offload.target_update(to=[offload.to(a, present=True)], device=0)
    with pytest.raises(OffloadError, match="'present' map type modifier"):
        offload.target_exit_data(offload.from_(a, present=True), device=0)
    assert len(table()) == 0 and allocs() == 0


def test_exit_and_update_of_never_mapped_data_are_noops(rt):
    a = np.arange(10.0)
    offload.target_exit_data(offload.from_(a), device=0)
    offload.target_update(to=[a], from_=[a], device=0)
    np.testing.assert_array_equal(a, np.arange(10.0))
    assert len(table()) == 0


def test_zero_length_sections_never_allocate(rt):
    a = np.zeros(10, np.int32)
    offload.target_enter_data(offload.to(a[3:3]), device=0)
    assert len(table()) == 0 and allocs() == 0
    offload.target_exit_data(offload.from_(a[3:3]), device=0)
    with pytest.raises(OffloadError, match="present"):
        offload.target_enter_data(offload.to(a[3:3], present=True), device=0)


def test_update_copies_present_data_both_ways(rt, add_one):
    a = np.zeros(50, np.int32)
    with offload.target_data(offload.alloc(a), device=0):
        a[:] = 7
        offload.target_update(to=[a], device=0)
        offload.target(add_one.add_one, a, 0, 50, device=0)
        assert (a == 7).all()
        offload.target_update(from_=[offload.from_(a[10:20], present=True)], device=0)
        assert (a[10:20] == 8).all() and (a[:10] == 7).all()
    assert (a[:10] == 7).all()                   # alloc: nothing copied back


def test_construct_with_one_failing_clause_is_all_or_nothing(rt):
    """§5 row: LLVM leaves the earlier clauses mapped."""
    a, b, c = np.zeros(10), np.zeros(20), np.zeros(30)
    pin = offload.lock(a, device=0)
    with pytest.raises(OffloadError, match="present"):
        offload.target_enter_data(offload.to(a), offload.to(b), offload.to(c, present=True),
                                  device=0)
    assert len(table()) == 0 and allocs() == 0
    assert offload.runtime.current().manager.get_device(0).plugin.pinned.lookup(a.ctypes.data).count == {0: 1}
    with pytest.raises(OffloadError):
        with offload.target_data(offload.to(b), offload.tofrom(b[::2]), device=0):
            pass
    assert len(table()) == 0 and allocs() == 0
    pin.unlock()


def test_exception_in_with_block_unmaps_without_copy_back(rt, add_one):
    a = np.zeros(10, np.int32)
    with pytest.raises(RuntimeError):
        with offload.target_data(offload.tofrom(a), device=0):
            offload.target(add_one.add_one, a, 0, 10, device=0)
            raise RuntimeError("half-finished")
    assert (a == 0).all()
    assert len(table()) == 0 and allocs() == 0


def test_read_only_arrays(rt, add_one):
    a = np.arange(10, dtype=np.int32)
    a.flags.writeable = False
    for clause in (offload.from_(a), offload.tofrom(a)):
        with pytest.raises(OffloadError, match="read-only"):
            offload.target_enter_data(clause, device=0)
    offload.target_enter_data(offload.to(a), device=0)
    offload.target_exit_data(offload.release(a), device=0)
    out = np.zeros(10, np.int32)
    offload.target(add_one.add_one, out, 0, 10, map=[offload.to(a), offload.tofrom(out)],
                   device=0)
    assert len(table()) == 0


def test_non_contiguous_array_is_named(rt):
    a = np.zeros((10, 10))
    with pytest.raises(OffloadError) as ei:
        offload.target_enter_data(offload.to(a[:, 2]), device=0)
    assert "non-contiguous" in str(ei.value) and "(10,)" in str(ei.value)
    assert len(table()) == 0


# ---- target regions ----------------------------------------------------------------------
def test_target_maps_unmapped_array_tofrom(rt, add_one):
    a = np.zeros(20, np.int32)
    offload.target(add_one.add_one, a, 0, 20, device=1)
    assert (a == 1).all()
    assert len(table(1)) == 0 and allocs(1) == 0


def test_kernel_gets_base_pointer_of_mapped_section(rt, add_one):
    """prelock.cpp's second region: map a[10:20] and pass a; the kernel touches a[10:20]."""
    a = np.zeros(100, np.int32)
    offload.target(add_one.add_one, a, 10, 20, map=[offload.tofrom(a[10:20])], device=0)
    expect = np.zeros(100, np.int32)
    expect[10:20] = 1
    np.testing.assert_array_equal(a, expect)


def test_kernel_argument_count_mismatch_leaves_nothing(rt, add_one):
    a = np.zeros(10, np.int32)
    pin = offload.lock(a, device=0)
    with pytest.raises(OffloadError, match="takes 3 argument"):
        offload.target(add_one.add_one, a, 0, map=[offload.tofrom(a)], device=0)
    assert len(table()) == 0 and allocs() == 0
    assert (a == 0).all()
    assert offload.runtime.current().manager.get_device(0).plugin.pinned.lookup(a.ctypes.data).count == {0: 1}
    pin.unlock()


def test_nowait_and_taskwait(rt, add_one):
    arrays = [np.zeros(1000, np.int32) for _ in range(8)]
    handles = [offload.target(add_one.add_one, a, 0, 1000, device=i % 2, nowait=True)
               for i, a in enumerate(arrays)]
    handles[0].wait()
    offload.taskwait()
    assert all((a == 1).all() for a in arrays)
    assert all(h.done() for h in handles)


def test_mandatory_offload_without_device_binary_fails(runtime, add_one):
    runtime(OMP_TARGET_OFFLOAD="mandatory", OFFLOAD_PLUGINS="host")
    ptx = offload.load_image(b"//\n.version 8.0\n.target sm_90\n.entry add_one()\n{\n}\n")
    a = np.zeros(4, np.int32)
    with pytest.raises(OffloadError) as ei:
        offload.target(ptx.add_one, a, 0, 4, device=0)
    assert ei.value.code is ErrorCode.INVALID_BINARY
    assert "no binary for device 0 (host)" in str(ei.value)


def test_default_offload_falls_back_to_host_image(runtime, add_one):
    runtime(OFFLOAD_PLUGINS="host")
    ptx = offload.load_image(b"//\n.version 8.0\n.target sm_90\n.entry add_one()\n{\n}\n")
    both = offload.Image.combine(ptx, add_one)
    a = np.zeros(4, np.int32)
    offload.target(both.add_one, a, 0, 4, device=0)      # host plugin picks the host binary
    offload.target(both.add_one, a, 0, 4, device=offload.omp_initial_device)
    assert (a == 2).all()


def test_info_prints_llvm_style_lines(runtime, capsys, add_one):
    runtime(LIBOMPTARGET_INFO=str(0x8 | 0x20 | 0x2))
    a = np.zeros(10, np.int32)
    offload.target(add_one.add_one, a, 0, 10, map=[offload.tofrom(a)], device=0)
    err = capsys.readouterr().err
    assert "Creating new map entry with HstPtrBase=0x" in err
    assert "Copying data from host to device" in err
    assert "Copying data from device to host" in err
    assert "Removing map entry with HstPtrBegin=0x" in err


def test_kernel_and_table_dump_info(runtime, capsys, add_one):
    runtime(LIBOMPTARGET_INFO=str(0x4 | 0x10))
    a = np.zeros(10, np.int32)
    with offload.target_data(offload.tofrom(a, name="a"), device=0):
        offload.target(add_one.add_one, a, 0, 10, device=0)
    err = capsys.readouterr().err
    assert "Launching kernel add_one with 1 blocks" in err
    assert "Host Ptr" in err and f"0x{a.ctypes.data:016x}" in err and " a" in err


def test_region_busy_marks_are_all_or_nothing(rt, add_one):
    """The clause-less region marks every mapped argument's entry in use under one lock;
    with one argument unmapped it marks none (the general path then maps it), and every
    mark is gone when the region ends."""
    a = np.zeros(8, np.int32)
    b = np.zeros(8, np.int32)
    offload.target_enter_data(offload.to(a), device=0)
    t = table()
    assert t.mark_busy_each([(a.ctypes.data, a.nbytes), (b.ctypes.data, b.nbytes)]) is None
    assert t.lookup(a.ctypes.data, a.nbytes).busy == 0
    offload.target(add_one.add_one, a, 0, 8, device=0)      # a mapped: the lean path
    offload.target(add_one.add_one, b, 0, 8, device=0)      # b not: mapped for the region
    assert t.lookup(a.ctypes.data, a.nbytes).busy == 0 and len(t) == 1
    offload.target_exit_data(offload.from_(a), device=0)
    np.testing.assert_array_equal(a, 1)
    np.testing.assert_array_equal(b, 1)


def test_member_clause_uses_its_structs_mapping_without_counting(rt):
    """MapType.MEMBER (the C edge's MEMBER_OF components): inside a mapping it changes no
    count and copies nothing back on its own; where nothing holds it, it maps itself and
    counts like any clause (so nothing is left behind)."""
    s = np.arange(16, dtype=np.int32)
    t = table()
    offload.target_enter_data(offload.to(s), device=0)
    e = t.lookup(s.ctypes.data, s.nbytes)
    member = offload.MapClause(s[4:8], MapType.TO | MapType.FROM | MapType.MEMBER).item()
    t.target_data_begin([member])
    assert (e.dyn, e.hold) == (1, 0)
    t.target_data_end([member])
    assert t.lookup(s.ctypes.data, s.nbytes) is e and e.dyn == 1
    offload.target_exit_data(offload.release(s), device=0)
    alone = offload.MapClause(s[4:8], MapType.TO | MapType.MEMBER).item()
    t.target_data_begin([alone])
    assert t.lookup(s[4:8].ctypes.data, 16).dyn == 1 and not alone.type & MapType.MEMBER
    t.target_data_end([alone])
    assert len(t) == 0 and allocs() == 0


def test_argument_kinds_are_checked_again_for_new_kinds(rt, add_one):
    """The per-kernel record of argument kinds that fit skips the check only for the same
    kinds: an array of another dtype after accepted calls is still refused, by name."""
    a = np.zeros(8, np.int32)
    for _ in range(3):
        offload.target(add_one.add_one, a, 0, 8, map=[offload.tofrom(a)], device=0)
    with pytest.raises(OffloadError, match="expected an array of int32"):
        offload.target(add_one.add_one, np.zeros(8, np.float64), 0, 8, device=0)
    with pytest.raises(OffloadError, match="expected an integer, got float"):
        offload.target(add_one.add_one, a, 0.5, 8, device=0)
    assert len(table()) == 0 and allocs() == 0


def test_mapped_owner_is_kept_alive(rt):
    import gc
    import weakref
    a = np.arange(1000.0)
    ref = weakref.ref(a)
    p = a.ctypes.data
    offload.target_enter_data(offload.to(a), device=0)
    del a
    gc.collect()
    assert ref() is not None and offload.omp_target_is_present(p, 0)
    offload.target_exit_data(offload.release(ref()), device=0)
    gc.collect()
    assert ref() is None


def test_devices_records(rt):
    recs = offload.devices()
    assert [r.number for r in recs] == [0, 1]
    assert all(r.plugin == "host" and "host CPU" in r.name for r in recs)


def test_concurrent_regions_share_one_mapping(rt, add_one):
    a = np.zeros(1000, np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        def work():
            for _ in range(200):
                offload.target(add_one.add_one, a, 0, 1, map=[offload.tofrom(a)], device=0)
        run_threads(work, [()] * 4)
        assert table().lookup(a.ctypes.data, a.nbytes).dyn == 1
    assert len(table()) == 0


# ---- prelocked reuse (the seed feature) ------------------------------------------------
def test_prelocked_map_makes_no_pin_calls_and_all_copies_are_pinned(recording, add_one):
    a = np.arange(1000, dtype=np.int32)
    with offload.locked(a, device=0):
        before = len(recording.of("lock")), len(recording.of("unlock"))
        offload.target(add_one.add_one, a, 0, 1000, map=[offload.tofrom(a)], device=0)
        offload.target(add_one.add_one, a, 10, 20, map=[offload.tofrom(a[10:20])], device=0)
        assert (len(recording.of("lock")), len(recording.of("unlock"))) == before
    copies = recording.of("submit") + recording.of("retrieve")
    assert len(copies) == 4 and all(c[3] for c in copies)
    assert sorted(c[2] for c in copies) == [40, 40, 4000, 4000]


def test_section_half_inside_pinned_entry_copied_in_two_pieces(recording):
    a = np.arange(100, dtype=np.int32)
    with offload.locked(a[:50], device=0):
        with offload.target_data(offload.to(a), device=0):
            pass
    subs = recording.of("submit")
    assert [(c[1] - a.ctypes.data, c[2], c[3]) for c in subs] == [(0, 200, True),
                                                                   (200, 200, False)]


def test_mapping_partly_overlapping_locked_buffer_works_unpinned(recording, add_one):
    """§5 row: LLVM fails the whole construct; we map and copy through both paths."""
    a = np.zeros(100, np.int32)
    with offload.locked(a[40:60], device=0):
        offload.target(add_one.add_one, a, 20, 80, map=[offload.tofrom(a[20:80])], device=0)
    assert (a[20:80] == 1).all() and (a[:20] == 0).all() and (a[80:] == 0).all()
    paths = {c[3] for c in recording.of("submit")}
    assert paths == {True, False}


def test_lock_mapped_on_pins_for_the_mapping(runtime):
    m = runtime(OFFLOAD_PLUGINS="recording", LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS="on")
    plugin = m.plugins[0]
    a = page_aligned(4 * 4096)
    base = vmlck_kb()
    with offload.target_data(offload.tofrom(a), device=0):
        assert vmlck_kb() - base == 16
        assert all(c[3] for c in plugin.of("submit"))
    assert vmlck_kb() == base and len(plugin.pinned) == 0


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
