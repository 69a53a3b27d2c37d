"""offload's locks, and the rule that keeps finalizers out of their steps.

The collector runs a finalizer (a `__del__`, a weakref.finalize callback, a DLPack
deleter) at whatever point of whatever thread made it collect: also inside one of
offload's locked steps. Its work takes offload's locks too (a free takes the device's, an
unpin the pin table's), and they are not reentrant, so run there it would wait for its own
thread forever. Every lock of offload is made here and counts, per thread, the steps its
thread is in; a finalizer that finds its thread in one queues its work (`defer`), and the
work runs as the thread leaves its outermost step or before it enters the next one
(`drain`): in order, and never inside a step. The compiled core's Lock counts in C with
the same rule (`attach`).
"""
from __future__ import annotations

import _thread
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Lock", "RLock", "Condition", "Latch", "latch", "new_lock", "in_step", "defer", "drain",
           "forget_deferred", "attach"]


class _Steps(threading.local):
    depth = 0                   # locked steps (and acquires under way) of this thread
    draining = False            # running deferred work (a finalizer it runs drains not)


_tls = _Steps()
_pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []   # deferred finalizer work
_compiled: list[Any] = []                    # [the compiled core], once attached


def in_step() -> bool:
    """Whether this thread is inside (or entering, or leaving) a locked step of offload."""
    return _tls.depth > 0 or (bool(_compiled) and _compiled[0].step_depth() > 0)


def defer(fn: Callable[..., Any], *args: Any) -> None:
    """Run `fn(*args)` when this thread is in no locked step (now, if it is in none)."""
    _pending.append((fn, args))                 # list.append: atomic
    drain()


def drain() -> None:
    """Run the deferred work, unless this thread is in a locked step or runs it already
    (one loop, not one frame per item); `fn` reports its own errors (a finalizer's are
    unraisable)."""
    t = _tls
    if t.draining:
        return
    t.draining = True
    try:
        while _pending and not in_step():
            try:
                fn, args = _pending.pop(0)      # another thread may have taken the last
            except IndexError:
                return
            fn(*args)
    finally:
        t.draining = False


def forget_deferred() -> None:
    """A forked child: the work its parent deferred belongs to the parent's runtime (the
    child starts empty), so none of it runs here."""
    _pending.clear()


def attach(module: Any) -> None:
    """Make the compiled core's Lock (module.Lock) keep this module's rule: its count is
    read by in_step, and it drains `_pending` as a thread leaves its outermost step."""
    module.steps_setup(_pending, drain)
    _compiled[:] = [module]


def new_lock() -> Any:
    """A lock (threading.Lock's interface) that counts its steps: the compiled core's
    where it is loaded (faster), else `Lock`."""
    return _compiled[0].Lock() if _compiled else Lock()


class Lock:
    """threading.Lock's interface, counted as a step of its thread."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        t = _tls
        if not t.depth and _pending:
            drain()
        t.depth += 1                            # before: a finalizer meanwhile defers
        try:
            got = self._lock.acquire(blocking, timeout)
        except BaseException:
            t.depth -= 1
            raise
        if not got:
            t.depth -= 1
        return got

    __enter__ = acquire

    def release(self) -> None:
        self._lock.release()
        t = _tls
        t.depth -= 1                            # after: a finalizer meanwhile defers
        if not t.depth and _pending:
            drain()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __repr__(self) -> str:
        return f"<offload step lock {'locked' if self.locked() else 'unlocked'}>"


class RLock(Lock):
    """threading.RLock's interface, each level counted as a step of its thread."""

    __slots__ = ()

    def __init__(self) -> None:
        self._lock = threading.RLock()  # type: ignore[assignment]

    def locked(self) -> bool:
        raise AttributeError("an RLock has no locked() (as threading.RLock)")

    def __repr__(self) -> str:
        return f"<offload reentrant step lock {self._lock!r}>"


def Condition() -> threading.Condition:
    """threading.Condition over one of these locks (not reentrant)."""
    return threading.Condition(new_lock())  # type: ignore[arg-type]


#: A latch: a plain lock that stands for work under way (an entry being made, or copied
#: back), held from its start and released when the work is done, perhaps by another
#: thread; others wait on it. Not a step: nothing is counted for it.
Latch = _thread.allocate_lock


def latch() -> Any:
    """A new latch, already held."""
    lock = Latch()
    lock.acquire()
    return lock
