"""Target regions' maps, and prelocked memory reused by later maps (the seed
feature)."""
import numpy as np
import pytest

import offload
from offload import ErrorCode, MapType, OffloadError
from tests.harness import run_threads
from tests.mapping_support import allocs, table

from tests.conftest import page_aligned, vmlck_kb


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


