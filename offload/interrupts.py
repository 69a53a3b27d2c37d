"""Ctrl-C and offload's operations: a SIGINT that arrives while the main thread is inside
an operation waits for the operation's end (its tables stay consistent), then
KeyboardInterrupt is raised (docs/semantics.md, "Interrupts")."""
from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable
from types import CodeType
from typing import Any, TypeVar

from . import locks

#: .rt: the runtime of the operation this thread is in (None outside operations)
inside = threading.local()
_MAIN = threading.main_thread().ident
#: code whose own frame keeps a Ctrl-C for the next operation's end (defers_interrupts)
_GUARDED: set[CodeType] = set()

F = TypeVar("F", bound=Callable[..., Any])


class _Sigint:
    """Ctrl-C that arrived while the main thread was inside an operation."""

    pending = False
    installed = False


def defers_interrupts(fn: Any) -> Any:
    """Mark a function (or code object) whose own frame keeps a Ctrl-C pending for the
    next operation's end instead of raising it there: the pure-Python operation wrapper's
    bookkeeping, a context manager's `__enter__` that hands over what its caller already
    holds, a finalizer that gives something back (Python would drop its exception)."""
    _GUARDED.add(fn if isinstance(fn, CodeType) else fn.__code__)
    return fn


#: offload.locks' Python locks keep a Ctrl-C for later in their own frames, as a C lock's
#: acquire and release cannot be interrupted half-way (a lock taken with its step not yet
#: counted, or given back with it still counted); so does running the deferred work
for _step in (locks.Lock.acquire, locks.Lock.release, locks.Lock.__exit__,
              locks.in_step, locks.defer, locks.drain):
    defers_interrupts(_step)


def interrupt_waits(frame: Any) -> bool:
    """Whether a Ctrl-C that Python checks for in `frame` now waits for an operation's
    end: inside an operation, or in a frame of code marked by `defers_interrupts`."""
    return getattr(inside, "rt", None) is not None or \
        (frame is not None and frame.f_code in _GUARDED)


def _deferring_sigint(signum: int, frame: Any) -> None:
    """SIGINT handler: inside an operation, remember the interrupt (the operation finishes
    and its tables stay consistent, then KeyboardInterrupt is raised); else raise now."""
    if interrupt_waits(frame):
        _Sigint.pending = True
        return
    _Sigint.pending = False             # one Ctrl-C, raised now
    raise KeyboardInterrupt


def _install_sigint_deferral() -> None:
    """Replace Python's default SIGINT handler (only that one, and only from the main
    thread) by one that never interrupts an operation half-way. Never in a C program on
    the drop-in library: an interpreter the library started leaves the process's signal
    dispositions (the program's handler, or SIG_IGN) as the program set them."""
    if _Sigint.installed or threading.get_ident() != _MAIN or \
            getattr(sys, "_offload_capi_owns_python", False):
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _deferring_sigint)
        _Sigint.installed = True
    except (ValueError, OSError):   # not the main interpreter, or no signals here
        pass


def _deliver_sigint() -> None:
    if _Sigint.pending and threading.get_ident() == _MAIN:
        _Sigint.pending = False
        raise KeyboardInterrupt


@defers_interrupts
def keep_interrupt() -> None:
    """A Ctrl-C delivered where it cannot propagate (a finalizer, whose exceptions Python
    ignores) stays pending for the next operation instead of being lost."""
    _Sigint.pending = True


def finalizer(fn: F) -> F:
    """`fn` as a finalizer (a __del__, a weakref.finalize callback, a DLPack deleter):
    a Ctrl-C in its own frame waits for the next operation (defers_interrupts), and one
    raised in what it calls is kept pending (keep_interrupt) instead of being dropped
    with the rest of the finalizer's work, as Python drops a finalizer's exceptions.
    Run by the collector inside one of offload's locked steps, it runs as its thread
    leaves the step (offload.locks: its work takes those locks, which are not reentrant)."""
    defers_interrupts(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            if locks.in_step():
                locks.defer(functools.partial(run, *args, **kwargs))
                return None
            locks.drain()                        # earlier work first, in order
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            keep_interrupt()
            return None
    run.__offload_finalizer__ = True  # type: ignore[attr-defined]
    defers_interrupts(run)
    return run  # type: ignore[return-value]
