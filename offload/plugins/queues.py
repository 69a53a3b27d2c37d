"""A device's queues (streams, HSA signal lists): made on demand, borrowed for one
operation, synchronized, given back. Written once for every plugin."""
from __future__ import annotations

import contextlib
from typing import Any, Protocol

from .. import locks


class QueueHooks(Protocol):
    """What a device must supply for its queues."""

    def _create_queue_impl(self) -> Any: ...
    def _destroy_queue_impl(self, queue: Any) -> None: ...
    def _sync_impl(self, queue: Any) -> None: ...


class Queues:
    """The queues of one device: a free list and every queue ever made."""

    def __init__(self, hooks: QueueHooks):
        self._hooks = hooks
        self._lock = locks.new_lock()
        self._free: list[Any] = []
        self.made: list[Any] = []
        #: the device's queues are all None (its work is synchronous): nothing to borrow
        self.synchronous = False

    def get(self) -> Any:
        """A queue for this caller alone until `release` (the free list's pop and append
        are atomic: no lock on the common path)."""
        try:
            return self._free.pop()
        except IndexError:
            pass
        q = self._hooks._create_queue_impl()
        with self._lock:
            self.made.append(q)
        return q

    def release(self, queue: Any) -> None:
        self._free.append(queue)

    def borrow(self, queue: Any | None = None) -> contextlib.AbstractContextManager[Any]:
        """`queue` itself when given; else a queue of our own, synchronized at the end
        (also when the block fails, so nothing in flight outlives it) and given back."""
        if queue is None and self.synchronous:
            return _NO_QUEUE
        return _Borrowed(self, queue)

    def drain(self) -> None:
        """Wait for every queue this device made."""
        for q in list(self.made):
            self._hooks._sync_impl(q)

    def destroy_all(self) -> None:
        with self._lock:
            made, self.made, self._free = self.made, [], []
        for q in made:
            self._hooks._destroy_queue_impl(q)


_NO_QUEUE = contextlib.nullcontext(None)


class _Borrowed:
    """The context manager of Queues.borrow (a class: cheaper than a generator)."""

    __slots__ = ("_queues", "_given", "_queue")

    def __init__(self, queues: Queues, queue: Any | None):
        self._queues = queues
        self._given = queue

    def __enter__(self) -> Any:
        if self._given is not None:
            return self._given
        self._queue = self._queues.get()
        return self._queue

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._given is not None:
            return
        q = self._queue
        if exc_type is not None and not issubclass(exc_type, Exception):
            return      # interrupted (a hung kernel?): do not wait, and do not reuse it
        try:
            if exc_type is None:
                self._queues._hooks._sync_impl(q)
            else:
                with contextlib.suppress(Exception):
                    self._queues._hooks._sync_impl(q)
        finally:
            self._queues.release(q)
