"""How GenericPlugin moves bytes: a copy split at pinned boundaries (and at the driver's
registration grid), pinned pieces straight from their device-accessible address, large
unpinned ones through staging, strided blocks as 2-D copies or rows, device to device;
each counted by route. Vendors give only the `_*_impl` copies."""
from __future__ import annotations

from typing import Any

from .. import profile
from ..pinned import PinnedMap
from ._libc import _ffi as _libc_ffi
from .device_hooks import DeviceHooks


def contiguous_tail(shape: tuple[int, ...], strides: tuple[int, ...],
                    itemsize: int) -> tuple[int, int]:
    """(k, row bytes): dimensions k and up are contiguous and merge into one row."""
    row, k = itemsize, len(shape)
    while k > 0 and strides[k - 1] == row:
        row *= shape[k - 1]
        k -= 1
    return k, row


def strided_rows(shape: tuple[int, ...], strides: tuple[int, ...],
                 itemsize: int) -> tuple[int, int, list[int]]:
    """(rows, bytes per row, byte offset of each row) of a strided block: trailing
    dimensions that are contiguous merge into one row."""
    k, row = contiguous_tail(shape, strides, itemsize)
    offsets = [0]
    for i in range(k - 1, -1, -1):
        offsets = [o + j * strides[i] for j in range(shape[i]) for o in offsets]
    return len(offsets), row, sorted(offsets)


_STAT_KEYS = {(True, True): "to unpinned", (True, False): "to pinned",
              (False, True): "from unpinned", (False, False): "from pinned"}


def _split_pinned(pieces: list[tuple[int, int, int | None]], host: int,
                  grid: int) -> list[tuple[int, int, int | None]]:
    """Split the pinned pieces of a copy of [host, ...) at multiples of `grid`."""
    out: list[tuple[int, int, int | None]] = []
    for off, n, via in pieces:
        while via is not None and n > 0:
            start = host + off
            step = min(n, grid - start % grid)
            out.append((off, step, via))
            off, n, via = off + step, n - step, via + step
        if via is None:
            out.append((off, n, via))
    return out



class Transfers:
    """GenericPlugin's data movement (a mixin over its devices, pins and thresholds)."""

    name: str
    asynchronous: bool
    staging_threshold: int | None
    stage_small_retrieves: bool
    pin_split: int | None
    pinned: PinnedMap

    def device(self, d: int) -> Any: raise NotImplementedError

    def data_submit(self, d: int, tgt: int, host: int, size: int, queue: Any = None) -> None:
        """Host -> device, split at pinned boundaries; pinned pieces go asynchronously
        from their device-accessible address, large unpinned ones through staging.
        Without a queue, returns when the data has arrived."""
        p = profile.active
        if p is not None:
            p.copy(self.device(d), self.name, d, True, size, queue,
                   lambda q: self._data_submit(d, tgt, host, size, q))
        else:
            self._data_submit(d, tgt, host, size, queue)

    def _data_submit(self, d: int, tgt: int, host: int, size: int, queue: Any) -> None:
        dev = self.device(d)
        if self._direct(size, True) and (queue is not None or not self.asynchronous):
            dev._submit_impl(tgt, host, size, queue, None)   # nothing pinned or staged
            dev.count("to unpinned", size)
        else:
            self._transfer(True, dev, tgt, host, size, queue)

    def data_retrieve(self, d: int, host: int, tgt: int, size: int, queue: Any = None) -> None:
        """Device -> host, the same way; without a queue, returns when complete."""
        p = profile.active
        if p is not None:
            p.copy(self.device(d), self.name, d, False, size, queue,
                   lambda q: self._data_retrieve(d, host, tgt, size, q))
        else:
            self._data_retrieve(d, host, tgt, size, queue)

    def _data_retrieve(self, d: int, host: int, tgt: int, size: int, queue: Any) -> None:
        dev = self.device(d)
        if self._direct(size, False) and (queue is not None or not self.asynchronous):
            dev._retrieve_impl(host, tgt, size, queue, None)
            dev.count("from unpinned", size)
        else:
            self._transfer(False, dev, tgt, host, size, queue)

    def _direct(self, size: int, to_device: bool) -> bool:
        """Whether a copy of `size` bytes is one plain copy: nothing is pinned (no piece
        to split off) and an unpinned copy of that size is not staged."""
        return not self.pinned._starts and not self._staged(size, to_device)

    def staging_from(self, to_device: bool) -> int | None:
        """The size from which unpinned copies to (or from) the device go through
        staging (None: never): the staging threshold, and 0 from the device where the
        plugin stages small retrieves."""
        stage = self.staging_threshold
        if stage is not None and not to_device and self.stage_small_retrieves:
            return 0
        return stage

    def _staged(self, size: int, to_device: bool) -> bool:
        stage = self.staging_from(to_device)
        return stage is not None and size >= stage

    def _crosses_split(self, host: int, size: int) -> bool:
        """Whether [host, host+size) spans two cells of the plugin's pin_split grid (one
        copy may not cross a registration boundary)."""
        grid = self.pin_split
        if not grid:
            return False
        return host // grid != (host + size - 1) // grid

    def _transfer(self, to_device: bool, dev: Any, tgt: int, host: int, size: int,
                  queue: Any) -> None:
        if queue is None and self.asynchronous:
            pieces = self.pinned.translate(host, size, dev.id)
            if len(pieces) == 1 and pieces[0][2] is not None and \
                    not self._crosses_split(host, size) and \
                    dev._copy_now_impl(to_device, tgt, host, size):
                dev.count(_STAT_KEYS[to_device, False], size)   # pinned, in one step
                return
            if len(pieces) == 1 and pieces[0][2] is None and self._staged(size, to_device):
                self._stage(dev, to_device, tgt, host, size, None)    # on staging's queues
                return
            with dev.queue() as q:             # ours: synchronized before we return
                self._transfer_on(dev, to_device, tgt, host, size, q)
        else:
            self._transfer_on(dev, to_device, tgt, host, size, queue)

    def _transfer_on(self, dev: Any, to_device: bool, tgt: int, host: int, size: int,
                     q: Any) -> None:
        if self._direct(size, to_device):
            if to_device:                      # nothing pinned, nothing to stage: one copy
                dev._submit_impl(tgt, host, size, q, None)
                dev.count("to unpinned", size)
            else:
                dev._retrieve_impl(host, tgt, size, q, None)
                dev.count("from unpinned", size)
            return
        pieces = self.pinned.translate(host, size, dev.id)
        grid = self.pin_split
        if grid and self._crosses_split(host, size):
            pieces = _split_pinned(pieces, host, grid)
        for off, n, via in pieces:
            if via is None and self._staged(n, to_device):
                self._stage(dev, to_device, tgt + off, host + off, n, q)
                continue
            if to_device:
                dev._submit_impl(tgt + off, host + off, n, q, via)
            else:
                dev._retrieve_impl(host + off, tgt + off, n, q, via)
            dev.count(_STAT_KEYS[to_device, via is None], n)

    def _stage(self, dev: Any, to_device: bool, tgt: int, host: int, n: int, q: Any) -> None:
        """An unpinned piece through the device's staging buffers, after the work queued
        on `q` (staging runs on queues of its own); one buffer's worth back from the
        device without workers."""
        if q is not None:
            dev._sync_impl(q)
        if to_device or n > dev.staging.chunk:
            dev.staging.copy(to_device, tgt, host, n)
        else:
            dev.staging.retrieve_small(tgt, host, n)
        dev.count("to staged" if to_device else "from staged", n)
        dev.count(_STAT_KEYS[to_device, True], n)

    def data_fill(self, d: int, tgt: int, value: int, size: int) -> None:
        """Set `size` device bytes at `tgt` to the byte `value`; returns when done."""
        dev = self.device(d)
        with dev.queue() as q:
            if dev._fill_impl(tgt, value & 0xFF, size, q):
                return
        chunk = min(size, 64 << 20)                  # a device that cannot fill: copies
        buf = bytearray([value & 0xFF]) * chunk
        src = int(_libc_ffi.cast("uintptr_t", _libc_ffi.from_buffer(buf)))
        for off in range(0, size, chunk):
            self.data_submit(d, tgt + off, src, min(chunk, size - off))

    def data_update_strided(self, d: int, to_device: bool, host: int, tgt: int,
                            shape: tuple[int, ...], strides: tuple[int, ...],
                            itemsize: int) -> None:
        """Copy a strided block (numpy shape and byte strides from `host` on the host and
        from `tgt` on the device, the same layout on both sides); returns when done.
        Blocks of one or two strided dimensions go as 2-D copies where the device has
        them (straight from pinned memory, else packed through staging buffers); the
        rest one contiguous row at a time on one queue."""
        p = profile.active
        if p is not None:
            size = itemsize
            for n in shape:
                size *= n
            p.copy(self.device(d), self.name, d, to_device, size, None,
                   lambda q: self._data_update_strided(d, to_device, host, tgt, shape,
                                                       strides, itemsize))
        else:
            self._data_update_strided(d, to_device, host, tgt, shape, strides, itemsize)

    def _data_update_strided(self, d: int, to_device: bool, host: int, tgt: int,
                             shape: tuple[int, ...], strides: tuple[int, ...],
                             itemsize: int) -> None:
        dev = self.device(d)
        if not self._strided_2d(dev, to_device, host, tgt, shape, strides, itemsize):
            rows, row, offsets = strided_rows(shape, strides, itemsize)
            with dev.queue() as q:
                for off in offsets:
                    self._transfer_on(dev, to_device, tgt + off, host + off, row, q)

    def _strided_2d(self, dev: Any, to_device: bool, host: int, tgt: int,
                    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
        """The block as 2-D copies (one per outer index of a 3-D block); False when it
        is not one or the device has no 2-D copies."""
        k, row = contiguous_tail(shape, strides, itemsize)
        if not 1 <= k <= 2 or type(dev)._copy_2d_impl is DeviceHooks._copy_2d_impl:
            return False
        pitch, height = strides[k - 1], shape[k - 1]
        if pitch < row or any(s <= 0 for s in strides[:k]):
            return False                             # overlapping or reversed rows
        planes = [0] if k == 1 else [j * strides[0] for j in range(shape[0])]
        hi = planes[-1] + (height - 1) * pitch + row
        pieces = self.pinned.translate(host, hi, dev.id)
        via = pieces[0][2] if len(pieces) == 1 else None
        pinned = via is not None
        nbytes = len(planes) * height * row
        if not pinned and self._staged(nbytes, to_device):
            for p in planes:                         # packed on the host, moved 2-D
                dev.staging.copy_rows(to_device, tgt + p, host + p, pitch, row, height)
            dev.count("to staged" if to_device else "from staged", nbytes)
        else:
            with dev.queue() as q:
                for p in planes:
                    if not dev._copy_2d_impl(to_device, tgt + p, pitch, host + p, pitch, row,
                                             height, q, None if via is None else via + p):
                        nbytes -= height * row       # refused (nothing copied): by rows,
                        for r in range(height):      # counted by _transfer_on
                            off = p + r * pitch
                            self._transfer_on(dev, to_device, tgt + off, host + off, row, q)
        key = ("to " if to_device else "from ") + ("pinned" if pinned else "unpinned")
        dev.count(key, nbytes)
        return True

    def data_exchange(self, src_d: int, src: int, dst_plugin: Any, dst_d: int,
                      dst: int, size: int, queue: Any = None) -> bool:
        dev = self.device(src_d)
        p = profile.active
        if p is not None:
            return bool(p.copy(dev, self.name, src_d, None, size, queue,
                               lambda q: self._data_exchange(dev, dst_plugin, dst_d, src,
                                                             dst, size, q)))
        return self._data_exchange(dev, dst_plugin, dst_d, src, dst, size, queue)

    @staticmethod
    def _data_exchange(dev: Any, dst_plugin: Any, dst_d: int, src: int, dst: int,
                       size: int, queue: Any) -> bool:
        done = dev._exchange_impl(src, dst_plugin.device(dst_d), dst, size, queue)
        if done:
            dev.count("peer", size)
        return done

