"""Finalizers and offload's locked steps (offload.locks): the collector may run a
finalizer inside any step of any thread, and a finalizer's work takes offload's locks,
which are not reentrant. Run there, a free waited for its own thread's device lock for
ever (the fresh-clone CI hang at 7c4777c was this class, in ExportedBlocks); now the work
is deferred to the moment the thread leaves its outermost step, in order, and done then.
Each test runs its step on a daemon thread with a bound, so a regression reports a
deadlock instead of hanging the suite."""
import gc
import pathlib
import re
import threading

import numpy as np
import pytest

import offload
from offload import _accel, config, locks
from tests.harness import background

ROOT = pathlib.Path(offload.__file__).resolve().parent


def _lock_types():
    module = _accel.load() if config.accel_enabled() else None
    types = [locks.Lock, locks.RLock]
    return types + ([module.Lock] if module is not None else [])


class _Cycle:
    """Something only the collector frees (a reference cycle holding `what`)."""

    def __init__(self, what):
        self.me, self.what = self, what


def _collect_inside(lock, then=None):
    """Collect garbage inside a step of `lock` on another thread; (what `then()` saw
    inside the step, whether the thread finished within 10 s)."""
    seen = []

    def step():
        with lock:
            gc.collect()
            if then is not None:
                seen.append(then())

    t = background(step)
    t.join(10)
    return seen, not t.is_alive()


@pytest.fixture
def no_automatic_collection():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_free_collected_inside_the_devices_step_runs_as_the_step_ends(
        runtime, no_automatic_collection):
    """offload.empty(kind='host')'s finalizer frees through the device, whose lock its
    thread holds: the free waits for the step's end (deadlocked before), then happens."""
    runtime()
    gen = offload.runtime.current().device(0).generic
    live = gen.live_allocations()
    _Cycle(offload.empty(4096, np.uint8, kind="host", device=0))
    assert gen.live_allocations() == live + 1
    seen, finished = _collect_inside(gen._lock, lambda: len(gen._allocs))
    assert finished, "deadlocked: the finalizer's free waited for its own thread's lock"
    assert seen == [live + 1]                       # not inside the step
    assert gen.live_allocations() == live           # but as it ended
    assert not locks._pending


def test_an_unpin_collected_inside_the_pin_tables_step_runs_as_the_step_ends(
        runtime, no_automatic_collection):
    """offload.empty(pinned=True)'s finalizer unpins through the pin table, whose lock its
    thread holds: the unpin waits for the step's end, then happens."""
    runtime()
    dev = offload.runtime.current().device(0)
    pins = dev.generic.plugin.pinned
    before = len(pins)
    a = offload.empty(4096, np.uint8, pinned=True, device=0)
    addr = a.ctypes.data
    _Cycle(a)
    del a
    assert pins.lookup(addr) is not None
    seen, finished = _collect_inside(pins._lock, lambda: addr in pins._starts)
    assert finished, "deadlocked: the finalizer's unpin waited for its own thread's lock"
    assert seen == [True]
    assert pins.lookup(addr) is None and len(pins) == before


@pytest.mark.parametrize("make", _lock_types(), ids=lambda t: f"{t.__module__}.{t.__name__}")
def test_deferred_work_runs_in_order_as_the_outermost_step_ends(make):
    """Work deferred in nested steps (of this lock type and a Python one) runs once, in
    order, after the outermost of them, never inside."""
    outer, inner = make(), locks.Lock()
    ran = []

    def work():
        ran.append(("ran", locks.in_step()))

    assert not locks.in_step()
    with outer:
        assert locks.in_step()
        with inner:
            locks.defer(work)
            locks.defer(lambda: ran.append(("second", locks.in_step())))
        assert ran == []                        # still inside `outer`
    assert ran == [("ran", False), ("second", False)]
    assert not locks.in_step() and not locks._pending


@pytest.mark.parametrize("make", _lock_types(), ids=lambda t: f"{t.__module__}.{t.__name__}")
def test_a_failed_or_timed_out_acquire_leaves_no_step_counted(make):
    """An acquire that does not take the lock (held by another thread; timed out) counts
    no step: later finalizers of this thread run at once."""
    lock = make()
    taken, gate = threading.Event(), threading.Event()

    def hold():
        with lock:
            taken.set()
            gate.wait(10)

    t = background(hold)
    assert taken.wait(10)
    try:
        assert not lock.acquire(blocking=False)
        assert not lock.acquire(timeout=0.01)
        assert not locks.in_step()
    finally:
        gate.set()
        t.join(10)
    ran = []
    locks.defer(lambda: ran.append(1))
    assert ran == [1]


def test_a_finalizer_in_a_step_is_deferred_and_keeps_its_guards():
    """interrupts.finalizer defers inside a step: the finalizer's body runs after the
    step, with its Ctrl-C kept pending as it would be at once."""
    from offload import interrupts
    calls = []

    @interrupts.finalizer
    def fin(x):
        calls.append((x, locks.in_step()))

    with locks.Lock():
        fin(1)
        assert calls == []
    assert calls == [(1, False)]
    fin(2)
    assert calls == [(1, False), (2, False)]


#: the locks of offload that are not steps: latches (held while work is under way,
#: released by whoever finishes it) are made by offload.locks.latch
_LOCK_CALL = re.compile(r"threading\.(Lock|RLock|Condition|Semaphore|BoundedSemaphore)\(\s*\)"
                        r"|allocate_lock\(|threading\.Condition\((?!self\._lock\))")


def test_every_lock_of_offload_is_made_by_offload_locks():
    """The class: a lock made elsewhere would not count its steps, and a finalizer inside
    it would wait for its own thread again. Every lock, reentrant lock and condition of
    offload comes from offload.locks (or is a condition over one of its locks)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "locks.py" and path.parent == ROOT:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _LOCK_CALL.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "locks made outside offload.locks:\n" + "\n".join(found)


def test_many_finalizers_deferred_in_one_step_all_run_after_it():
    """More finalizers deferred inside one step than Python's recursion limit: each ran
    the others from its own frame before (RecursionError in the CI run of the twin, a
    Handle's event lost); now one loop runs them all, in order, after the step."""
    import sys
    from offload import interrupts
    ran = []

    @interrupts.finalizer
    def fin(i):
        ran.append(i)

    n = sys.getrecursionlimit() + 500
    with locks.Lock():
        for i in range(n):
            fin(i)
        assert ran == []
    assert ran == list(range(n)) and not locks._pending


def test_a_forked_child_runs_none_of_the_work_its_parent_deferred():
    """Work deferred in the parent (inside a step) belongs to the parent's runtime: the
    child (which starts empty) drops it, the parent still runs it."""
    import os
    ran = []
    lock = locks.Lock()
    lock.acquire()
    locks.defer(lambda: ran.append(os.getpid()))
    pid = os.fork()
    if pid == 0:                                   # the child
        ok = not locks._pending
        lock.release()
        os._exit(0 if ok and not ran else 1)
    _, status = os.waitpid(pid, 0)
    lock.release()
    assert os.waitstatus_to_exitcode(status) == 0, "the child kept its parent's work"
    assert ran == [os.getpid()]
