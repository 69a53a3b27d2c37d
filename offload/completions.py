"""Completion of work queued on device queues: one watcher thread per runtime polls the
events recorded after such work and, as each completes, runs what must follow it
(releasing the mappings it kept) and completes its future. Nothing else blocks: later
work on other queues waits for the event on the device."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import locks

if TYPE_CHECKING:
    import concurrent.futures

__all__ = ["Watcher"]

_NAP_S = 20e-6          # between polling rounds that found nothing complete


class Watcher:
    """Polls `query()` of each watched piece of work; when it returns True (or raises),
    runs `finish()` and completes the future (with the query's error, if any)."""

    def __init__(self) -> None:
        self._cv = locks.Condition()
        self._pending: list[tuple[Callable[[], bool], concurrent.futures.Future,
                                  Callable[[], None]]] = []
        self._thread: threading.Thread | None = None

    def watch(self, query: Callable[[], bool], finish: Callable[[], None]
              ) -> concurrent.futures.Future:
        import concurrent.futures  # (here: not at a C program's start)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            self._pending.append((query, fut, finish))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="offload-completions",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()
        return fut

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                todo = list(self._pending)
            finished = False
            for item in todo:
                query, fut, finish = item
                error: BaseException | None = None
                try:
                    if not query():
                        continue
                except BaseException as exc:      # noqa: BLE001 - the work's own error
                    error = exc
                with self._cv:
                    self._pending.remove(item)
                try:
                    finish()
                except BaseException as exc:      # noqa: BLE001 - reported through fut
                    error = error or exc
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)
                finished = True
            if not finished:
                time.sleep(_NAP_S)
