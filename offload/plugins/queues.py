"""A device's queues (streams, HSA signal lists): made on demand, borrowed for one
operation, synchronized, given back. Written once for every plugin."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol


class QueueHooks(Protocol):
    """What a device must supply for its queues."""

    def _create_queue_impl(self) -> Any: ...
    def _destroy_queue_impl(self, queue: Any) -> None: ...
    def _sync_impl(self, queue: Any) -> None: ...


class Queues:
    """The queues of one device: a free list and every queue ever made."""

    def __init__(self, hooks: QueueHooks):
        self._hooks = hooks
        self._lock = threading.Lock()
        self._free: list[Any] = []
        self.made: list[Any] = []

    def get(self) -> Any:
        """A queue for this caller alone until `release`."""
        with self._lock:
            if self._free:
                return self._free.pop()
        q = self._hooks._create_queue_impl()
        with self._lock:
            self.made.append(q)
        return q

    def release(self, queue: Any) -> None:
        with self._lock:
            self._free.append(queue)

    @contextlib.contextmanager
    def borrow(self, queue: Any | None = None) -> Iterator[Any]:
        """`queue` itself when given; else a queue of our own, synchronized at the end
        (also when the block fails, so nothing in flight outlives it) and given back."""
        if queue is not None:
            yield queue
            return
        q = self.get()
        try:
            yield q
        except BaseException:
            with contextlib.suppress(Exception):
                self._hooks._sync_impl(q)
            raise
        else:
            self._hooks._sync_impl(q)
        finally:
            self.release(q)

    def drain(self) -> None:
        """Wait for every queue this device made."""
        for q in list(self.made):
            self._hooks._sync_impl(q)

    def destroy_all(self) -> None:
        with self._lock:
            made, self.made, self._free = self.made, [], []
        for q in made:
            self._hooks._destroy_queue_impl(q)
