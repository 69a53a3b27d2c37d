"""Copies of unpinned host memory through a device's own pinned staging buffers."""
from __future__ import annotations

import ctypes
import os
import threading
from typing import TYPE_CHECKING, Any, Protocol

from .. import locks
from .._lazy import numpy as np
from ._libc import memmove

if TYPE_CHECKING:
    import concurrent.futures


def _futures() -> Any:
    """concurrent.futures, imported on the first staged copy (not at a C program's start)."""
    import concurrent.futures
    return concurrent.futures

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
    def _copy_now_impl(self, to_device: bool, tgt: int, host: int, size: int) -> bool: ...
    def _copy_2d_impl(self, to_device: bool, tgt: int, tgt_pitch: int, host: int,
                      host_pitch: int, width: int, height: int, queue: Any,
                      pinned: int | None = None) -> bool: ...


class _Flat:
    """A contiguous copy cut into chunks of `chunk` bytes."""

    def __init__(self, hooks: StagingHooks, tgt: int, host: int, size: int, chunk: int):
        self.hooks, self.tgt, self.host, self.size, self.chunk = hooks, tgt, host, size, chunk
        self.count = -(-size // chunk)

    def _piece(self, c: int) -> tuple[int, int]:
        off = c * self.chunk
        return off, min(self.chunk, self.size - off)

    def pack(self, c: int, buf: int) -> None:
        off, n = self._piece(c)
        memmove(buf, self.host + off, n)

    def unpack(self, c: int, buf: int) -> None:
        off, n = self._piece(c)
        memmove(self.host + off, buf, n)

    def dma(self, to_device: bool, c: int, buf: int, q: Any) -> None:
        off, n = self._piece(c)
        if to_device:
            self.hooks._submit_impl(self.tgt + off, buf, n, q, buf)
        else:
            self.hooks._retrieve_impl(buf, self.tgt + off, n, q, buf)


def _bytes_at(addr: int, shape: tuple[int, int], pitch: int) -> np.ndarray:
    """The rows at `addr` (shape: rows, bytes per row) as a uint8 view, `pitch` apart."""
    span = (shape[0] - 1) * pitch + shape[1]
    raw = np.frombuffer(memoryview((ctypes.c_char * span).from_address(addr)).cast("B"),
                        dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(raw, shape, (pitch, 1))


class _Rows:
    """`height` rows of `width` bytes, `pitch` apart on both sides, cut into chunks of
    whole rows: packed compactly into a buffer, moved by one 2-D copy each."""

    def __init__(self, hooks: StagingHooks, tgt: int, host: int, pitch: int, width: int,
                 height: int, chunk: int):
        self.hooks, self.tgt, self.host = hooks, tgt, host
        self.pitch, self.width, self.height = pitch, width, height
        self.per = max(1, chunk // width)
        self.count = -(-height // self.per)

    def _rows(self, c: int) -> tuple[int, int]:
        r0 = c * self.per
        return r0, min(self.per, self.height - r0)

    def pack(self, c: int, buf: int) -> None:
        r0, n = self._rows(c)
        np.copyto(_bytes_at(buf, (n, self.width), self.width),
                  _bytes_at(self.host + r0 * self.pitch, (n, self.width), self.pitch))

    def unpack(self, c: int, buf: int) -> None:
        r0, n = self._rows(c)
        np.copyto(_bytes_at(self.host + r0 * self.pitch, (n, self.width), self.pitch),
                  _bytes_at(buf, (n, self.width), self.width))

    def dma(self, to_device: bool, c: int, buf: int, q: Any) -> None:
        r0, n = self._rows(c)
        if not self.hooks._copy_2d_impl(to_device, self.tgt + r0 * self.pitch, self.pitch,
                                        buf, self.width, self.width, n, q, buf):
            raise RuntimeError("a device with staging must copy 2-D blocks")


class Staging:
    """Staging buffers and workers of one device. Each transfer takes a set of lanes of
    its own (sets are reused); workers pull chunks as they free up."""

    def __init__(self, hooks: StagingHooks, chunk: int, lanes: int):
        self._hooks = hooks
        self.chunk = chunk
        self.lanes = lanes
        self._lock = locks.new_lock()
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

    def kept_buffer(self) -> int:
        """One buffer (`chunk` bytes of pinned memory) taken for the caller's own use
        until `close` frees it with the rest."""
        return self._take(1)[0][0]

    def copy(self, to_device: bool, tgt: int, host: int, size: int) -> None:
        """Copy [host, host+size) to or from tgt (see `_run`)."""
        self._run(to_device, _Flat(self._hooks, tgt, host, size, self.chunk))

    def retrieve_small(self, tgt: int, host: int, size: int) -> None:
        """Copy `size` bytes (at most one chunk) from tgt to [host, host+size) through one
        buffer: its DMA and a polled wait (in one step where the device has one), then the
        copy out. Interrupted or failed, it writes nothing into the caller's memory and
        its buffer is not used again (a DMA may still land in it; freed at close)."""
        hooks = self._hooks
        lanes = self._take(1)
        buf, q = lanes[0]
        if not hooks._copy_now_impl(False, tgt, buf, size):
            hooks._retrieve_impl(buf, tgt, size, q, buf)
            hooks._sync_impl(q)
        memmove(host, buf, size)
        self._give(lanes)

    def copy_rows(self, to_device: bool, tgt: int, host: int, pitch: int, width: int,
                  height: int) -> None:
        """Copy `height` rows of `width` bytes, `pitch` apart at `host` and at `tgt`:
        rows packed into the buffers on the host, one 2-D DMA per buffer."""
        self._run(to_device, _Rows(self._hooks, tgt, host, pitch, width, height, self.chunk))

    def _run(self, to_device: bool, plan: _Flat | _Rows) -> None:
        """Several workers, each with two buffers, overlap the host side of one chunk
        with the DMA of another. On any exception (Ctrl-C included) the workers stop at
        their next chunk and are waited for, and every lane's queue drained, before this
        returns or raises: nothing writes into the caller's memory after that."""
        hooks = self._hooks
        nchunks = plan.count
        workers = max(1, min(self.lanes // 2, nchunks, (os.cpu_count() or 2) - 1))
        todo = iter(range(nchunks))            # shared: next() is atomic under the GIL
        cancel = threading.Event()
        all_lanes: list[Lane] = []

        def work(w: int) -> None:
            lanes = all_lanes[2 * w:2 * w + 2]
            pending: list[int | None] = [None, None]
            for j, c in enumerate(todo):
                if cancel.is_set():
                    break
                buf, q = lanes[j % 2]
                if to_device:
                    hooks._sync_impl(q)                 # the lane's last DMA is done
                    plan.pack(c, buf)
                    plan.dma(True, c, buf, q)
                else:
                    plan.dma(False, c, buf, q)
                    k = (j + 1) % 2
                    other = pending[k]
                    if other is not None:              # drain the other lane meanwhile
                        hooks._sync_impl(lanes[k][1])
                        plan.unpack(other, lanes[k][0])
                        pending[k] = None
                    pending[j % 2] = c
            for k in (0, 1):
                hooks._sync_impl(lanes[k][1])
                last = pending[k]
                if last is not None and not cancel.is_set():
                    plan.unpack(last, lanes[k][0])

        futures: list[concurrent.futures.Future] = []
        try:
            all_lanes = self._take(2 * workers)
            if workers == 1:
                work(0)
                return
            with self._lock:
                if self._pool is None:
                    self._pool = _futures().ThreadPoolExecutor(
                        self.lanes // 2, thread_name_prefix="offload-staging")
                pool = self._pool
            futures = [pool.submit(work, w) for w in range(workers)]
            _futures().wait(futures)               # all done before the lanes go back
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
            _futures().wait(futures)
            return
        except BaseException:                       # noqa: BLE001 - keep waiting
            continue
