"""The table's paths for one plain clause (MappingTable.begin_plain / end_plain, taken by
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
from offload.mapping import MappingTable
from tests.harness import run_threads

SRC = "void inc(int *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n"


def _general_only(monkeypatch):
    """Route begin_plain/end_plain through target_data_begin/target_data_end (tables made
    after this; OFFLOAD_ACCEL=0 keeps the C versions away)."""
    monkeypatch.setattr(MappingTable, "begin_plain", MappingTable.begin_general)
    monkeypatch.setattr(MappingTable, "end_plain", MappingTable.end_general)


def _counting(monkeypatch):
    """Count the calls that reach the Python begin_plain/end_plain (tables made after
    this): all of them without the accelerator, its fallbacks with it."""
    calls = {"begin": 0, "end": 0}
    begin, end = MappingTable.begin_plain, MappingTable.end_plain

    def counted_begin(*args, **kw):
        calls["begin"] += 1
        return begin(*args, **kw)

    def counted_end(*args, **kw):
        calls["end"] += 1
        return end(*args, **kw)
    monkeypatch.setattr(MappingTable, "begin_plain", counted_begin)
    monkeypatch.setattr(MappingTable, "end_plain", counted_end)
    return calls


def _accelerated() -> bool:
    """Whether tables on the host run begin_plain/end_plain in C here."""
    return offload.runtime.current().device(0).table.begin_plain.__class__.__name__ == "Method"


def _scenario():
    """Run a fixed sequence of constructs; after each, the table (offsets from a, sizes,
    counts, busy marks), the array and the device copies, or the error raised."""
    k = offload.compile_c(SRC)
    a = np.arange(64, dtype=np.int32)
    table = offload.runtime.current().device(0).table
    base = a.ctypes.data
    steps = [
        lambda: offload.target_enter_data(offload.to(a), device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0),
        lambda: offload.target_exit_data(offload.from_(a), device=0),      # copies back
        lambda: offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.to(a)], device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.from_(a)], device=0),
        lambda: offload.target_enter_data(offload.alloc(a), device=0),
        lambda: offload.target_enter_data(offload.to(a), device=0),        # present: no copy
        lambda: offload.target(k.inc, a[:16], 16, map=[offload.tofrom(a[:16])], device=0),
        lambda: offload.target(k.inc, a[8:16], 8, map=[offload.tofrom(a[8:16])], device=0),
        lambda: offload.target_exit_data(offload.from_(a), device=0),
        lambda: offload.target_exit_data(offload.from_(a), device=0),      # last: copies
        lambda: offload.target_exit_data(offload.from_(a), device=0),      # absent: nothing
        lambda: offload.target_enter_data(offload.to(a[:16]), device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0),  # extends
        lambda: offload.target_enter_data(offload.tofrom(a), device=0),   # extends
        lambda: offload.target_exit_data(offload.release(a[:16]), device=0),
        lambda: offload.target_exit_data(offload.delete(a), device=0),
        lambda: offload.target_enter_data(offload.to(a), device=0),
        lambda: np.add(a, 100, out=a),
        lambda: offload.target_update(from_=[a[8:16]], device=0),    # inside the mapping
        lambda: offload.target_update(to=[a], device=0),
        lambda: offload.target(k.inc, a, a.size, device=0),           # on mapped data
        lambda: offload.target_update(from_=[a], device=0),
        lambda: offload.target_update(to=[a[60:64], a[:4]], device=0),
        lambda: offload.target_update(from_=[np.zeros(4, np.int32)], device=0),  # absent
        lambda: offload.target_update(to=[a], from_=[a[:2]], device=0),
        lambda: offload.target_exit_data(offload.delete(a), device=0),
        lambda: offload.target_update(to=[a], device=0),              # absent: skipped
        lambda: offload.target(k.inc, a, a.size, device=0),    # unmapped: tofrom for it
        lambda: offload.target_enter_data(offload.to(a[:32]), device=0),
        lambda: offload.target(k.inc, a[16:32], 16, device=0),        # inside a mapping
        lambda: offload.target(k.inc, a, 16, device=0),     # its first bytes mapped: those
        lambda: offload.target_exit_data(offload.from_(a[:32]), device=0),
    ]
    trace = []
    for step in steps:
        try:
            step()
            what = "ok"
        except OffloadError as exc:
            what = (exc.code, exc.message.replace(hex(base), "A"))
        entries = [(e.hst_begin - base, e.size, e.dyn, e.hold, e.busy)
                   for e in table.entries()]
        device = [np.frombuffer((np.ctypeslib.as_ctypes_type(np.uint8) * e.size)
                                .from_address(e.tgt_begin), np.uint8).tobytes()
                  for e in table.entries()]
        gen = offload.runtime.current().device(0).generic
        memory = (dict(gen.stats), gen.live_allocations(), gen.pool.bytes)
        trace.append((what, entries, a.tolist(), device, memory))
    return trace


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


@pytest.mark.parametrize("host_async,limit", [(0, _accel.LIMIT), (1, _accel.LIMIT), (0, 0)])
def test_threads_sharing_one_array_keep_the_table_consistent(runtime, monkeypatch,
                                                             host_async, limit):
    """8 threads map, unmap, update, run regions on and delete the same array at once (every
    plain path and its fallbacks under contention; with host queues on worker threads, regions
    take the general path beside plain enters and exits; limit 0: the accelerator copies
    outside the table lock); the counts never go negative, and one delete afterwards
    leaves no entry and no device allocation."""
    import os
    import random
    import time
    monkeypatch.setattr(_accel, "LIMIT", limit)
    runtime(OFFLOAD_HOST_ASYNC=host_async)
    k = offload.compile_c(SRC)
    a = np.zeros(256, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    live = dev.generic.live_allocations()
    seconds = min(float(os.environ.get("OFFLOAD_STRESS_SECONDS", "3")), 5.0)
    errors = []
    counts = [0] * 8

    def work(i):
        rng = random.Random(i)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            op = rng.randrange(8)
            try:
                if op == 5:                        # one-array updates, present or not
                    offload.target_update(to=[a] if rng.random() < 0.5 else [a[8:64]],
                                          device=0)
                elif op == 6:
                    offload.target_update(from_=[a[:128]], device=0)
                elif op == 7:                      # a region on mapped data, else mapped
                    offload.target(k.inc, a, a.size, device=0)
                elif op == 0:
                    offload.target_enter_data(offload.to(a), device=0)
                elif op == 1:
                    offload.target_exit_data(offload.from_(a), device=0)
                elif op == 2:
                    offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0)
                elif op == 3:
                    with offload.target_data(offload.tofrom(a), device=0):
                        offload.target(k.inc, a, a.size, map=[offload.to(a)], device=0)
                elif rng.random() < 0.1:
                    offload.target_exit_data(offload.delete(a), device=0)
                for e in dev.table.entries():
                    if e.dyn < 0 or e.hold < 0 or e.busy < 0:
                        errors.append(repr(e))
            except Exception as exc:             # noqa: BLE001 - none expected
                errors.append(repr(exc))
            counts[i] += 1

    run_threads(work, [(i,) for i in range(8)], timeout=seconds + 60)
    assert not errors, errors[:5]
    assert sum(counts) > 100
    offload.target_exit_data(offload.delete(a), device=0)
    assert len(dev.table) == 0 and dev.generic.live_allocations() == live


@pytest.mark.parametrize("enter", ["plain", "general"])
def test_an_exit_waits_for_a_mapping_another_thread_is_still_making(runtime, monkeypatch,
                                                                    enter):
    """A mapping is in the table from before its first copy; an exit that finds it then
    waits for that copy instead of copying back (and freeing) memory not yet filled."""
    import ctypes
    runtime(OFFLOAD_ACCEL=0)      # the Python path (in C a mapping is made under the lock)
    a = np.arange(64, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    plugin = dev.plugin
    real = plugin.data_submit
    go, started = threading.Event(), threading.Event()

    def slow(d, tgt, host, size, queue=None):
        ctypes.memset(tgt, 0x7F, size)               # what an unfilled copy holds
        started.set()
        assert go.wait(10)
        real(d, tgt, host, size, queue)
    monkeypatch.setattr(plugin, "data_submit", slow)
    clause = offload.to(a)
    maker = threading.Thread(target=lambda: offload.target_enter_data(clause, device=0)
                             if enter == "plain" else
                             dev.table.target_data_begin([clause.item()]))
    maker.start()
    assert started.wait(10)
    done = threading.Event()
    exiting = threading.Thread(target=lambda: (offload.target_exit_data(offload.from_(a),
                                                                        device=0), done.set()))
    exiting.start()
    assert not done.wait(0.3)                        # waits for the first copy
    go.set()
    maker.join(10)
    exiting.join(10)
    assert done.is_set()
    assert (a == np.arange(64)).all() and len(dev.table) == 0


@pytest.mark.parametrize("racer", ["update", "target", "mapped_ptr"])
def test_work_on_a_mapping_another_thread_is_still_making_waits_for_it(runtime, monkeypatch,
                                                                       racer):
    """An update, a region on mapped data or omp_get_mapped_ptr that finds a mapping whose
    device memory another thread has not allocated yet waits for it (they used, or
    returned, device address 0)."""
    runtime(OFFLOAD_ACCEL=0)      # the Python path (in C a mapping is made under the lock)
    k = offload.compile_c(SRC)
    a = np.arange(64, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    real = dev.generic.alloc
    go, started = threading.Event(), threading.Event()

    def slow(size, kind):
        started.set()
        assert go.wait(10)
        return real(size, kind)
    monkeypatch.setattr(dev.generic, "alloc", slow)
    maker = threading.Thread(target=lambda: offload.target_enter_data(offload.to(a), device=0))
    maker.start()
    assert started.wait(10)
    monkeypatch.undo()
    done = threading.Event()

    seen = []

    def race():
        if racer == "update":
            offload.target_update(to=[a], device=0)
        elif racer == "target":
            offload.target(k.inc, a, a.size, device=0)
        else:
            seen.append(offload.omp_get_mapped_ptr(a, 0))
        done.set()
    racing = threading.Thread(target=race)
    racing.start()
    assert not done.wait(0.3)                        # waits for the allocation and copy
    go.set()
    maker.join(10)
    racing.join(10)
    assert done.is_set()
    if racer == "mapped_ptr":
        assert seen == [offload.omp_get_mapped_ptr(a, 0)] and seen[0]
    offload.target_exit_data(offload.from_(a), device=0)
    assert (a == np.arange(64) + (racer == "target")).all() and len(dev.table) == 0


def test_plain_in_c_answers_as_mapclause_plain(runtime):
    """The table's plain_of (MapClause.plain in C with the accelerator) over arrays of every
    layout and dtype kind and clauses of every type."""
    from offload.clauses import MapClause, MapType
    runtime(OFFLOAD_ACCEL=1)
    plain_of = offload.runtime.current().device(0).table.plain_of
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
            got, want = plain_of(clause), MapClause.plain(clause)
            assert (got is None) == (want is None), (arr.dtype, t)
            if want is not None:
                plain += 1
                assert got[:3] == want[:3] and type(got[2]) is int
                assert got[3] is want[3] and got[4] is want[4]
    assert plain >= 30


@pytest.mark.parametrize("accel", [1, 0])
def test_threads_mixing_whole_and_partial_mappings_on_two_devices(runtime, accel):
    """8 threads on two devices and two arrays (one above the accelerator's under-the-lock
    copy size): whole-array maps, unmaps, regions with and without clauses (nowait too),
    updates, and a part of each array mapped and released beside them. Kernels touch only
    the first 16 elements, so a region translated through the partial mapping stays inside
    it. Nothing fails but the documented race ("no longer mapped"), nothing crashes, and
    every table and device allocation is empty once the references are dropped. (A longer
    run of this mix found the implicit unmap that copied a whole array out of a smaller
    mapping; tests/test_mapping.py pins that case down.)"""
    import os
    import random
    import time
    runtime(OFFLOAD_HOST_NUM_DEVICES=2, OFFLOAD_ACCEL=accel)
    k = offload.compile_c(SRC)
    arrays = [np.zeros(256, np.int32), np.zeros(40000, np.int32)]
    rt = offload.runtime.current()
    live = [rt.device(d).generic.live_allocations() for d in range(2)]
    seconds = min(float(os.environ.get("OFFLOAD_STRESS_SECONDS", "3")), 5.0)
    errors = []
    counts = [0] * 8

    def work(i):
        rng = random.Random(100 + i)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            a, d, op = rng.choice(arrays), rng.randrange(2), rng.randrange(11)
            try:
                if op == 0:
                    offload.target_enter_data(offload.to(a), device=d)
                elif op == 1:
                    offload.target_exit_data(offload.from_(a), device=d)
                elif op == 2:
                    offload.target(k.inc, a, 16, map=[offload.tofrom(a)], device=d)
                elif op == 3:
                    with offload.target_data(offload.tofrom(a), device=d):
                        offload.target(k.inc, a, 16, device=d)
                elif op == 4:
                    offload.target_update(to=[a], device=d)
                elif op == 5:
                    offload.target_update(from_=[a[:100]], device=d)
                elif op == 6:
                    offload.target(k.inc, a, 16, device=d)
                elif op == 7:
                    offload.target_enter_data(offload.alloc(a[:64]), device=d)
                elif op == 8:
                    offload.target_exit_data(offload.release(a[:64]), device=d)
                elif op == 9:
                    offload.target(k.inc, a, 16, map=[offload.tofrom(a)], device=d,
                                   nowait=True).wait()
                elif rng.random() < 0.2:
                    offload.target_exit_data(offload.delete(a), device=d)
            except OffloadError as exc:
                if not any(w in exc.message for w in ("extension", "no longer mapped")):
                    errors.append(repr(exc))
            except Exception as exc:             # noqa: BLE001 - none expected
                errors.append(repr(exc))
            counts[i] += 1

    run_threads(work, [(i,) for i in range(8)], timeout=seconds + 60)
    assert not errors, errors[:5]
    assert sum(counts) > 100
    for d in range(2):
        for a in arrays:
            offload.target_exit_data(offload.delete(a), device=d)
            offload.target_exit_data(offload.delete(a[:64]), device=d)
    assert [len(rt.device(d).table) for d in range(2)] == [0, 0]
    assert [rt.device(d).generic.live_allocations() for d in range(2)] == live


def test_a_compiled_core_with_another_entry_layout_is_refused(runtime, monkeypatch):
    """An entry field the compiled core does not know (it would make entries without it)
    fails loudly when a table starts, instead of every C-made entry silently lacking it."""
    if _accel.load() is None:
        pytest.skip("the accelerator does not build here (no compiler or Python headers)")
    from offload import entries, mapping

    class Wider(entries.HostDataToTarget):
        __slots__ = ("extra",)
    Wider.__slots__ = entries.HostDataToTarget.__slots__ + ("extra",)
    monkeypatch.setattr(mapping, "HostDataToTarget", Wider)
    runtime(OFFLOAD_ACCEL=1)
    with pytest.raises(TypeError, match="disagree on the entry layout"):
        offload.target_enter_data(offload.to(np.zeros(4)))
