"""The table's paths for one single-range clause (MappingTable.begin_single_range / end_single_range, taken by
target regions, target_enter_data and target_exit_data with one to/from/tofrom/alloc clause
over a whole array) against the general path: the same counts, copies, errors and waits."""
import os
import shutil
import sysconfig
import threading

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError, _accel
from tests.single_range_support import SRC, _accelerated, _counting, _general_only, _scenario


@pytest.mark.parametrize("limit", [_accel.LIMIT, 0])
def test_plain_paths_match_the_general_path(runtime, monkeypatch, limit):
    """The same trace (tables, copies, arrays, errors, copy statistics, allocations, pool)
    through the C paths (offload/accel_c, where it builds; limit 0: every copy made
    outside the table lock), the Python plain paths and the general path."""
    monkeypatch.setattr(_accel, "LIMIT", limit)
    runtime(OFFLOAD_ACCEL=1)
    accelerated = _accelerated()
    fast = _scenario() + _scenario()           # the second run: the pool has blocks
    runtime(OFFLOAD_ACCEL=0)
    assert not _accelerated()
    plain = _scenario() + _scenario()
    runtime(OFFLOAD_ACCEL=0)
    _general_only(monkeypatch)
    general = _scenario() + _scenario()
    assert fast == plain == general
    assert fast[14][0][0] is ErrorCode.INVALID_ARGUMENT           # the extension refused
    assert fast[11][2] != fast[10][2]                             # the last exit copied
    if not accelerated and _accel.load() is not None:
        pytest.fail("the accelerator loads but the host table does not use it")


def test_the_accelerator_takes_the_plain_cases_and_falls_back_for_the_rest(runtime,
                                                                           monkeypatch):
    if _accel.load() is None:
        pytest.skip("the accelerator does not build here (no C compiler or Python headers)")
    calls = _counting(monkeypatch)
    runtime(OFFLOAD_ACCEL=0)
    _scenario()
    _scenario()
    python = dict(calls)
    calls.update(begin=0, end=0)
    runtime(OFFLOAD_ACCEL=1)
    assert _accelerated()
    _scenario()
    _scenario()
    # the second run finds blocks in the pool: most calls stay in C; the extension,
    # the overlap and the steps on a section go to Python
    assert 0 < calls["begin"] < python["begin"] and 0 < calls["end"] < python["end"]


def test_the_accelerator_builds_where_a_compiler_and_headers_are(runtime):
    include = sysconfig.get_paths()["include"]
    cc = offload.config.read().cc
    if not os.path.exists(os.path.join(include, "Python.h")) or shutil.which(cc) is None:
        pytest.skip(f"no Python.h in {include} or no C compiler {cc!r}: the Python paths")
    runtime(OFFLOAD_ACCEL=1)
    assert _accel.load() is not None and _accelerated()


def test_a_table_lock_held_elsewhere_sends_the_call_to_python_which_waits(runtime):
    runtime(OFFLOAD_ACCEL=1)
    a = np.arange(16, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    offload.target_enter_data(offload.to(a), device=0)       # the pool gets a block
    offload.target_exit_data(offload.release(a), device=0)
    done = threading.Event()
    with dev.table._lock:
        t = threading.Thread(target=lambda: (offload.target_enter_data(offload.to(a),
                                                                       device=0), done.set()))
        t.start()
        assert not done.wait(0.3)                     # blocked on the lock, not past it
    t.join(10)
    assert done.is_set() and len(dev.table) == 1
    a[:] = 7
    offload.target_exit_data(offload.from_(a), device=0)
    assert (a == np.arange(16)).all() and len(dev.table) == 0


def test_a_trimmed_pool_and_a_cleared_table_keep_working(runtime):
    """The accelerator holds the pool's dict and the table's structures: trimming and
    clearing change them in place."""
    runtime(OFFLOAD_ACCEL=1)
    k = offload.compile_c(SRC)
    a = np.arange(32, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    gen = dev.generic
    live = gen.live_allocations()
    for step in range(6):
        offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0)
        if step == 2:
            gen.trim_pool()
            assert gen.pool.bytes == 0
        if step == 4:
            offload.target_enter_data(offload.to(a), device=0)
            entry = dev.table.entries()[0]
            dev.table.clear()                 # as teardown does (the memory is ours now)
            gen.free(entry.tgt_begin)
    assert (a == np.arange(32) + 6).all()
    assert len(dev.table) == 0 and gen.live_allocations() == live
    assert gen.pool.bytes == sum(size * len(blocks) for size, blocks in gen.pool._free.items())


def test_a_failed_copy_into_a_new_mapping_leaves_nothing(runtime, monkeypatch):
    runtime(OFFLOAD_ACCEL=0)                 # the plugin's copy (C copies by memcpy)
    a = np.arange(8, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    live = dev.generic.live_allocations()
    plugin = dev.plugin

    def broken(*args, **kw):
        raise OffloadError(ErrorCode.BACKEND_FAILURE, "copy failed (test)")
    monkeypatch.setattr(plugin, "data_submit", broken)
    with pytest.raises(OffloadError, match="copy failed"):
        offload.target_enter_data(offload.to(a), device=0)
    assert len(dev.table) == 0 and dev.generic.live_allocations() == live
    monkeypatch.undo()
    offload.target_enter_data(offload.to(a), device=0)                  # works again
    assert len(dev.table) == 1
    offload.target_exit_data(offload.release(a), device=0)
    assert len(dev.table) == 0 and dev.generic.live_allocations() == live


def test_the_last_exit_waits_for_work_in_flight_on_the_mapping(runtime):
    """An operation in flight (its busy mark) keeps the device copy until it ends; the
    exit that drops the last reference waits for it, then copies back."""
    runtime()
    a = np.zeros(16, dtype=np.int32)
    offload.target_enter_data(offload.to(a), device=0)
    table = offload.runtime.current().device(0).table
    e = table.acquire_busy(a.ctypes.data, a.nbytes)               # as a nowait region does
    np.ctypeslib.as_array((np.ctypeslib.as_ctypes_type(np.int32) * 16)
                          .from_address(e.tgt_begin))[:] = 7      # its result on the device
    done = threading.Event()
    t = threading.Thread(target=lambda: (offload.target_exit_data(offload.from_(a), device=0),
                                         done.set()))
    t.start()
    assert not done.wait(0.3)                                    # waits for the busy mark
    table.release_busy([e])
    assert done.wait(10)
    t.join()
    assert (a == 7).all() and len(table) == 0


def test_plain_in_c_answers_as_mapclause_plain(runtime):
    """The table's single_range_of (MapClause.single_range in C with the accelerator) over arrays of every
    layout and dtype kind and clauses of every type."""
    from offload.clauses import MapClause, MapType
    runtime(OFFLOAD_ACCEL=1)
    single_range_of = offload.runtime.current().device(0).table.single_range_of
    read_only = np.zeros(5)
    read_only.flags.writeable = False

    class Sub(np.ndarray):
        pass
    arrays = [np.zeros(10), np.zeros(10)[::2], np.zeros(0), np.array([1, None]),
              np.zeros(4, dtype="M8[s]"), np.zeros((3, 4)).T, np.zeros((2, 3, 4))[:, 1],
              np.zeros((2, 3, 4))[1], np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]),
              np.zeros(3, dtype=[("a", "i4"), ("b", "O")]), read_only,
              np.zeros(4).view(Sub), np.zeros(3, np.complex64), np.zeros(5, bool),
              np.zeros(2, "U3"), np.zeros(2, np.float16)]
    types = [MapType.TO, MapType.FROM, MapType.TO | MapType.FROM, MapType(0),
             MapType.DELETE, MapType.TO | MapType.ALWAYS, MapType.FROM | MapType.PRESENT]
    plain = 0
    for arr in arrays:
        for t in types:
            clause = MapClause(arr, t)
            got, want = single_range_of(clause), MapClause.single_range(clause)
            assert (got is None) == (want is None), (arr.dtype, t)
            if want is not None:
                plain += 1
                assert got[:3] == want[:3] and type(got[2]) is int
                assert got[3] is want[3] and got[4] is want[4]
    assert plain >= 30


def test_a_compiled_core_with_another_entry_layout_is_refused(runtime, monkeypatch):
    """An entry field the compiled core does not know (it would make entries without it)
    fails loudly when a table starts, instead of every C-made entry silently lacking it."""
    if _accel.load() is None:
        pytest.skip("the accelerator does not build here (no compiler or Python headers)")
    from offload import entries

    class Wider(entries.HostDataToTarget):
        __slots__ = ("extra",)
    Wider.__slots__ = entries.HostDataToTarget.__slots__ + ("extra",)
    monkeypatch.setattr(entries, "HostDataToTarget", Wider)
    runtime(OFFLOAD_ACCEL=1)
    with pytest.raises(TypeError, match="disagree on the entry layout"):
        offload.target_enter_data(offload.to(np.zeros(4)))
    runtime(OFFLOAD_ACCEL=0)                      # the twin has no other layout to agree with
    a = np.zeros(4)
    offload.target_enter_data(offload.to(a))
    offload.target_exit_data(offload.release(a))


def test_a_tables_steps_are_chosen_once_and_no_method_is_replaced(runtime):
    """The common single-array steps are a typed record (`table.steps`): the compiled
    core's where it takes them, else the table's own methods; no method of the table is
    shadowed on the instance (issue 26: no method replaced on an instance)."""
    table = offload.runtime.current().device(0).table
    shadowed = [name for name in vars(table) if callable(getattr(type(table), name, None))]
    assert shadowed == []
    steps = table.steps
    assert steps._fields == ("begin_single_range", "end_single_range", "update_single_range",
                             "present", "launch_present", "release_present", "update_arrays",
                             "present_map", "launch_present_map", "call_present_map")
    if _accelerated():
        assert type(steps.begin_single_range).__name__ == "Method"
    else:
        assert steps.begin_single_range == table.begin_single_range
    presents = (steps.present, steps.launch_present, steps.present_map,
                steps.launch_present_map)
    if _accel.load() is None or not table.plugin.config.accel:
        assert presents == (None,) * 4
    assert len({p is None for p in presents}) == 1            # all the core's, or none


def test_a_region_on_mapped_data_gets_its_arguments_as_a_typed_record(runtime):
    """present(args) -> PresentArgs(kernel_args, marked) or None, never a bare tuple; the
    marks it makes are given back by release_present (LLVM's region on mapped data: the
    entries stay while the kernel runs)."""
    table = offload.runtime.current().device(0).table
    present = table.steps.present
    if present is None:
        pytest.skip("no compiled core here: regions on mapped data take the Python path")
    a = np.arange(8, dtype=np.int32)
    assert present((a, 3)) is None                    # not mapped: nothing marked
    with offload.target_data(offload.to(a)):
        e = table.lookup(a.ctypes.data, a.nbytes)
        found = present((a, 3, 2.5))
        assert type(found).__name__ == "PresentArgs" and len(found) == 2
        assert found.kernel_args == [e.tgt_begin, 3, 2.5] and found.marked == [e]
        assert e.busy == 1
        table.steps.release_present(found.marked)
        assert e.busy == 0
        assert present((a, object())) is None and e.busy == 0   # an object: Python decides


@pytest.mark.parametrize("room", [True, False], ids=["pool", "freed"])
def test_a_copy_back_outside_the_lock_gives_its_block_back_either_way(runtime, monkeypatch,
                                                                       room):
    """The compiled core's last copy back made outside the table's lock (every copy, with
    limit 0) brings the data back, then puts the block back on the pool when the pool has
    room, else frees it through MappingTable._release; nothing stays allocated."""
    monkeypatch.setattr(_accel, "LIMIT", 0)
    calls = _counting(monkeypatch)                 # the Python methods' calls
    runtime(OFFLOAD_ACCEL=1)
    if not _accelerated():
        pytest.skip("the accelerator does not build here (no C compiler or Python headers)")
    k = offload.compile_c(SRC)
    gen = offload.runtime.current().device(0).generic
    a = np.arange(1024, dtype=np.int32)
    offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0)   # pools a block
    live, pooled = gen.live_allocations(), gen.pool.bytes
    assert pooled == a.nbytes
    if not room:
        gen.pool.limit = 0                    # the block is taken, never given back
    calls.update(begin=0, end=0)
    offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0)
    assert calls == {"begin": 0, "end": 0}, calls          # both ends in C
    assert (a == np.arange(1024) + 2).all()
    assert gen.live_allocations() == live and len(offload.runtime.current().device(0).table) == 0
    assert gen.pool.bytes == (a.nbytes if room else 0)
