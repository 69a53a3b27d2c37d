"""Map clauses and reference counts of enter / exit data."""
import numpy as np
import pytest

import offload
from offload import MapType, OffloadError
from tests.mapping_support import allocs, device_view, table


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


