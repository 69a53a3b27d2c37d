"""Copies of unpinned host memory through a device's own pinned staging buffers."""
from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Any, Protocol

from ._libc import memmove

Lane = tuple[int, Any]          # a pinned buffer's address, and the queue that drains it


class StagingHooks(Protocol):
    """What a device must supply for staging."""

    def _alloc_staging_impl(self, size: int) -> Lane: ...
    def _free_staging_impl(self, addr: int, queue: Any) -> None: ...
    def _sync_impl(self, queue: Any) -> None: ...
    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: int | None) -> None: ...
    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: int | None) -> None: ...


class Staging:
    """Staging buffers and workers of one device. Each transfer takes a set of lanes of
    its own (sets are reused); workers pull chunks as they free up."""

    def __init__(self, hooks: StagingHooks, chunk: int, lanes: int):
        self._hooks = hooks
        self.chunk = chunk
        self.lanes = lanes
        self._lock = threading.Lock()
        self._sets: list[list[Lane]] = []        # every set made
        self._free: list[list[Lane]] = []        # ... and those not in use
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def _take(self, count: int) -> list[Lane]:
        with self._lock:
            lanes = self._free.pop() if self._free else []
            if not lanes:
                self._sets.append(lanes)
        while len(lanes) < count:
            lanes.append(self._hooks._alloc_staging_impl(self.chunk))
        return lanes

    def _give(self, lanes: list[Lane]) -> None:
        with self._lock:
            self._free.append(lanes)

    def close(self) -> None:
        """Stop the workers and free every buffer (teardown)."""
        with self._lock:
            pool, self._pool = self._pool, None
            sets, self._sets, self._free = self._sets, [], []
        if pool is not None:
            pool.shutdown(wait=True)
        for lanes in sets:
            for addr, q in lanes:
                self._hooks._free_staging_impl(addr, q)

    def copy(self, to_device: bool, tgt: int, host: int, size: int) -> None:
        """Copy [host, host+size) to or from tgt: several workers, each with two buffers,
        overlap the host memcpy of one chunk with the DMA of another. On any exception
        (Ctrl-C included) the workers stop at their next chunk and are waited for, and
        every lane's queue drained, before this returns or raises: nothing writes into
        the caller's memory after that."""
        hooks, chunk = self._hooks, self.chunk
        nchunks = -(-size // chunk)
        workers = max(1, min(self.lanes // 2, nchunks, (os.cpu_count() or 2) - 1))
        todo = iter(range(nchunks))            # shared: next() is atomic under the GIL
        cancel = threading.Event()
        all_lanes: list[Lane] = []

        def work(w: int) -> None:
            lanes = all_lanes[2 * w:2 * w + 2]
            pending: list[tuple[int, int] | None] = [None, None]
            for j, c in enumerate(todo):
                if cancel.is_set():
                    break
                buf, q = lanes[j % 2]
                off = c * chunk
                n = min(chunk, size - off)
                if to_device:
                    hooks._sync_impl(q)                 # the lane's last DMA is done
                    memmove(buf, host + off, n)
                    hooks._submit_impl(tgt + off, buf, n, q, buf)
                else:
                    hooks._retrieve_impl(buf, tgt + off, n, q, buf)
                    k = (j + 1) % 2
                    other = pending[k]
                    if other is not None:              # drain the other lane meanwhile
                        hooks._sync_impl(lanes[k][1])
                        memmove(host + other[0], lanes[k][0], other[1])
                        pending[k] = None
                    pending[j % 2] = (off, n)
            for k in (0, 1):
                hooks._sync_impl(lanes[k][1])
                last = pending[k]
                if last is not None and not cancel.is_set():
                    memmove(host + last[0], lanes[k][0], last[1])

        futures: list[concurrent.futures.Future] = []
        try:
            all_lanes = self._take(2 * workers)
            if workers == 1:
                work(0)
                return
            with self._lock:
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        self.lanes // 2, thread_name_prefix="offload-staging")
                pool = self._pool
            futures = [pool.submit(work, w) for w in range(workers)]
            concurrent.futures.wait(futures)       # all done before the lanes go back
            for f in futures:
                f.result()
        except BaseException:
            cancel.set()
            _wait_uninterruptibly(futures)
            for _, q in all_lanes:                  # no DMA may land after we return
                try:
                    hooks._sync_impl(q)
                except BaseException:               # noqa: BLE001 - the first error wins
                    pass
            raise
        finally:
            if all_lanes:
                self._give(all_lanes)


def _wait_uninterruptibly(futures: list[concurrent.futures.Future]) -> None:
    """Wait for every future, even through further Ctrl-Cs."""
    while True:
        try:
            concurrent.futures.wait(futures)
            return
        except BaseException:                       # noqa: BLE001 - keep waiting
            continue
