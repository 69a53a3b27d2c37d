"""nowait work: a Handle per construct, the worker threads that run it (NowaitPool), and
`depend=` (a construct runs after the handles it names; a failed one fails it, named)."""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import locks
from .completions import Watcher
from .device import Device
from .errors import ErrorCode, OffloadError
from .interrupts import finalizer

if TYPE_CHECKING:
    import concurrent.futures

_WORKER_PREFIX = "offload-nowait"


def _in_worker() -> bool:
    return threading.current_thread().name.startswith(_WORKER_PREFIX)


class Handle:
    """A `nowait` construct in flight; `wait()` returns its result or raises its error.
    Work queued on a Stream also carries the event recorded after it (`event`, of the
    plugin device `device`): later stream work waits for it on the device."""

    def __init__(self, future: concurrent.futures.Future, owner: NowaitPool, thread: int,
                 device: Any = None, event: Any = None):
        self._future = future
        self._owner = owner
        self._thread = thread
        self.device = device
        self.event = event
        self._pid = os.getpid()

    def _inherited(self, what: str) -> None:
        """A Handle a forked child inherited: its work runs in the parent, whose workers
        the child does not have (a wait hung for ever)."""
        if os.getpid() != self._pid:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"Handle.{what}: this work was started by process {self._pid} "
                               f"before fork(); it runs there, and a forked child starts "
                               f"with an empty runtime: start the work again in the child")

    @finalizer
    def __del__(self) -> None:
        dev, ev = self.device, self.event
        if ev is not None and dev is not None and os.getpid() == self._pid:
            try:
                dev.event_destroy(ev)
            except Exception:                   # noqa: BLE001 - the runtime went first
                pass

    def wait(self) -> Any:
        """Block until the work is done; return its result or raise what it raised. A
        worker of the nowait pool that waits (a host task waiting on offload work, a
        dependence) lends its place meanwhile: the pool runs one more thread, so work
        queued behind the waiters still runs."""
        self._inherited("wait")
        lent = not self._future.done() and _in_worker()
        if lent:
            self._owner.lend(1)
        try:
            return self._future.result()
        finally:
            if lent:
                self._owner.lend(-1)
            if self._future.done():     # interrupted (Ctrl-C): still the thread's work
                self._owner.forget(self)

    def done(self) -> bool:
        """Whether the work has finished (successfully or not)."""
        self._inherited("done")
        return self._future.done()

    def __repr__(self) -> str:
        f = self._future
        if os.getpid() != self._pid:
            state = f"of process {self._pid}"
        elif not f.done():
            state = "running"
        elif f.cancelled():
            state = "cancelled"
        else:
            exc = f.exception()
            state = "done" if exc is None else f"failed: {type(exc).__name__}: {exc}"
        d = self.device
        where = f" on a stream of {d.plugin.name} device {d.id}" if d is not None else ""
        return f"<offload.Handle {state}{where}>"


class NowaitPool:
    """Worker threads for `nowait` constructs, and each thread's outstanding handles."""

    def __init__(self, runtime: Any, workers: int = 8):
        self._runtime = runtime
        self._workers = workers
        self._lock = locks.new_lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._handles: dict[int, list[Handle]] = {}     # spawning thread -> its handles
        self._watcher: Watcher | None = None            # completes Stream work's handles

    def spawn(self, fn: Callable[..., Any], *args: Any,
              depend: Sequence[Handle] = ()) -> Handle:
        """Run fn(*args) on a worker after the `depend` handles have finished (a failed
        dependence fails this work too, naming it)."""
        if depend:
            deps = check_depend(depend)
            fn, args = _after, (deps, fn, args)
        with self._lock:
            if self._pool is None:        # (imported here: not at a C program's start)
                import concurrent.futures
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix=_WORKER_PREFIX)
            thread = threading.get_ident()
            rt = self._runtime
            rt.begin()                      # in flight from submission until it finishes
            try:
                h = Handle(self._pool.submit(rt.run_as_operation, fn, args), self, thread)
            except BaseException:
                rt.end()
                raise
            self._handles.setdefault(thread, []).append(h)
        return h

    def lend(self, n: int) -> None:
        """`n` more (or, negative, fewer) workers: a worker starts or stops waiting."""
        with self._lock:
            pool = self._pool
            if pool is None:
                return
            pool._max_workers += n               # ThreadPoolExecutor's own bound
            if n > 0:
                pool._adjust_thread_count()      # start a thread for queued work

    def watch(self, device: Any, queue: Any, release: Callable[[], None]) -> Handle:
        """A Handle for the work queued so far on `queue` of plugin device `device`:
        an event is recorded after it; when it completes, `release()` runs (on the
        watcher thread) and the Handle is done. Nothing waits on the caller's thread."""
        rt = self._runtime
        ev = device.event_create()
        try:
            device.event_record(ev, queue)
        except BaseException:
            device.event_destroy(ev)
            raise
        thread = threading.get_ident()
        rt.begin()

        def finish() -> None:
            try:
                release()
            finally:
                rt.end()
        with self._lock:
            if self._watcher is None:
                self._watcher = Watcher()
            fut = self._watcher.watch(functools.partial(device.event_query, ev), finish)
            h = Handle(fut, self, thread, device, ev)
            self._handles.setdefault(thread, []).append(h)
        return h

    def forget(self, h: Handle) -> None:
        with self._lock:
            mine = self._handles.get(h._thread)
            if mine is not None and h in mine:
                mine.remove(h)
                if not mine:
                    del self._handles[h._thread]

    def pending(self) -> int:
        with self._lock:
            return sum(1 for hs in self._handles.values() for h in hs if not h.done())

    def wait(self, thread: int | None = None, errors: bool = True) -> None:
        """Wait for the handles spawned by `thread` (every thread's when None); raise
        the first error among them after all have finished (unless errors=False)."""
        first: BaseException | None = None
        while True:
            with self._lock:
                if thread is None:
                    todo = [h for hs in self._handles.values() for h in hs]
                else:
                    todo = list(self._handles.get(thread, ()))
            if not todo:
                break
            for h in todo:
                try:
                    h.wait()
                except BaseException as exc:   # noqa: BLE001 - re-raised below
                    if not h.done():
                        raise                  # interrupted: a later wait waits for it
                    first = first or exc
        if first is not None and errors:
            raise first

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def check_depend(depend: Any, what: str = "depend") -> tuple[Handle, ...]:
    """`depend` as a tuple of Handles, or INVALID_ARGUMENT naming what is not one."""
    if isinstance(depend, Handle):
        depend = (depend,)
    if not isinstance(depend, (list, tuple)):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: expected a list of Handles (from nowait work), got "
                           f"{type(depend).__name__}")
    for i, h in enumerate(depend):
        if not isinstance(h, Handle):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{what}[{i}]: expected a Handle (from nowait work), got "
                               f"{type(h).__name__}")
    return tuple(depend)


def _after(deps: tuple[Handle, ...], fn: Callable[..., Any], args: tuple) -> Any:
    """Wait for the dependences (on this worker, not the caller), then run fn."""
    wait_depend(deps)
    return fn(*args)


def stream_queue(stream: Any, dev: Device | None, what: str) -> Any:
    """The queue of an offload.Stream made for `dev` (None for no stream)."""
    if stream is None:
        return None
    queue = getattr(stream, "queue", None)
    owner = getattr(stream, "device", object())
    if dev is None or owner != dev.number or getattr(stream, "_open", True) is False:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: stream= must be an open offload.Stream of the construct's "
                           f"device ({'the host' if dev is None else dev.number}), got "
                           f"{stream!r}")
    return queue


def queue_after(deps: Sequence[Handle], device: Any, queue: Any) -> None:
    """Order later work on `queue` of plugin device `device` after `deps`: on the
    device (an event wait) for Stream work of the same device that is still running,
    on the host for anything else. A failed dependence raises, naming it."""
    for i, h in enumerate(deps):
        if h.event is not None and h.device is device and not h._future.done():
            device.queue_wait_event(queue, h.event)
            continue
        exc = h._future.exception()
        if exc is not None:
            raise OffloadError(getattr(exc, "code", ErrorCode.UNKNOWN),
                               f"dependence {i} failed, so this work did not run: "
                               f"{exc}") from exc


def wait_depend(deps: Sequence[Handle]) -> None:
    """Block until the dependences finish; raise naming the first that failed."""
    for i, h in enumerate(deps):
        exc = h._future.exception()
        if exc is not None:
            raise OffloadError(getattr(exc, "code", ErrorCode.UNKNOWN),
                               f"dependence {i} failed, so this work did not run: "
                               f"{exc}") from exc

