"""Asynchronous queues for the host plugin (OFFLOAD_HOST_ASYNC=1): one worker thread per
queue runs its work in order, so ordering through queues and events is tested without a
GPU. Events are set by the queue that records them."""
from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from .. import locks
from ..errors import ErrorCode, OffloadError
from .common import Interrupts


class HostEvent:
    """An event of a host queue: set when the queue reaches the point it was recorded."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._set.set()                      # never recorded: complete

    def reset(self) -> None:
        self._set.clear()

    def fire(self) -> None:
        self._set.set()

    def done(self) -> bool:
        return self._set.is_set()

    def wait(self) -> None:
        """Wait, waking every 50 ms so a pending Ctrl-C is delivered."""
        while not self._set.wait(0.05):
            Interrupts.deliver()


class HostQueue:
    """Work run in order by a worker thread; the first error is kept for `drain`."""

    def __init__(self) -> None:
        self._cond = locks.Condition()
        self._work: collections.deque[Callable[[], Any]] = collections.deque()
        self._busy = False
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="offload-host-queue",
                                        daemon=True)
        self._thread.start()

    def put(self, fn: Callable[[], Any]) -> None:
        with self._cond:
            self._work.append(fn)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._work and not self._closed:
                    self._cond.wait()
                if not self._work:
                    return
                fn = self._work.popleft()
                self._busy = True
            try:
                fn()
            except BaseException as exc:     # kept for the next drain, as a stream's error
                with self._cond:
                    if self._error is None:
                        self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def idle(self) -> bool:
        with self._cond:
            return not self._work and not self._busy

    def drain(self) -> None:
        """Wait until everything queued has run; raise the first error it raised. From
        the queue's own thread (a host function waiting for its queue) that would never
        happen: refused."""
        if threading.current_thread() is self._thread:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "a host function waited for its own queue (synchronize, or "
                               "an operation on it): it would wait for itself")
        while True:
            with self._cond:
                if not self._work and not self._busy:
                    exc, self._error = self._error, None
                    break
                self._cond.wait(0.05)
            Interrupts.deliver()                 # outside the lock: Ctrl-C gets through
        if exc is not None:
            raise exc

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
