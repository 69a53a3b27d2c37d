"""The table's paths for one plain clause (MappingTable.begin_plain / end_plain, taken by
target regions, target_enter_data and target_exit_data with one to/from/tofrom/alloc clause
over a whole array) against the general path: the same counts, copies, errors and waits."""
import threading

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.mapping import MappingTable

SRC = "void inc(int *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n"


def _general_only(monkeypatch):
    """Route begin_plain/end_plain through target_data_begin/target_data_end."""
    monkeypatch.setattr(MappingTable, "begin_plain", MappingTable.begin_general)
    monkeypatch.setattr(MappingTable, "end_plain", MappingTable.end_general)


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
        trace.append((what, entries, a.tolist(), device))
    return trace


def test_plain_paths_match_the_general_path(runtime, monkeypatch):
    runtime()
    fast = _scenario()
    runtime()
    _general_only(monkeypatch)
    general = _scenario()
    assert fast == general
    assert fast[14][0][0] is ErrorCode.INVALID_ARGUMENT           # the extension refused
    assert fast[11][2] != fast[10][2]                             # the last exit copied


def test_a_failed_copy_into_a_new_mapping_leaves_nothing(runtime, monkeypatch):
    runtime()
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


@pytest.mark.parametrize("host_async", [0, 1])
def test_threads_sharing_one_array_keep_the_table_consistent(runtime, host_async):
    """8 threads map, unmap, run regions on and delete the same array at once (every plain
    path and its fallbacks under contention; with host queues on worker threads, regions
    take the general path beside plain enters and exits); the counts never go negative,
    and one delete afterwards leaves no entry and no device allocation."""
    import os
    import random
    import time
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
            op = rng.randrange(5)
            try:
                if op == 0:
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

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
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
    runtime()
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
    runtime()
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
