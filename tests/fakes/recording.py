"""Test double: the host plugin with every pin and transfer hook call recorded."""
from __future__ import annotations

import threading

from offload import ErrorCode, OffloadError
from offload.plugins.common import GenericPlugin
from offload.plugins.host import HostDevice, HostPlugin
from offload.plugins.staging import _bytes_at


class RecordingDevice(HostDevice):
    def _alloc_impl(self, size, kind):
        if self.plugin.fail_allocs:
            self.plugin.fail_allocs -= 1
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "out of device memory (injected)")
        addr = super()._alloc_impl(size, kind)
        self.plugin.record("alloc", addr, size, kind)
        return addr

    def _free_impl(self, addr, size, kind):
        self.plugin.record("free", addr, size, kind)
        super()._free_impl(addr, size, kind)

    def _submit_impl(self, tgt, host, size, queue, pinned):
        self.plugin.record("submit", host, size, pinned is not None)
        super()._submit_impl(tgt, host, size, queue, pinned)

    def _retrieve_impl(self, host, tgt, size, queue, pinned):
        self.plugin.record("retrieve", host, size, pinned is not None)
        super()._retrieve_impl(host, tgt, size, queue, pinned)


class RecordingPlugin(HostPlugin):
    """Host plugin named 'recording' whose hook calls land in `calls`."""

    name = "recording"
    device_class = RecordingDevice
    # strided updates through the generic layer (row by row), not the host's shortcut
    _data_update_strided = GenericPlugin._data_update_strided

    def __init__(self, config):
        super().__init__(config)
        self.calls: list[tuple] = []
        self.fail_allocs = 0           # this many next allocations run out of memory
        self.fail_after_pin = None     # an exception the next pin raises once it pinned
        self._rec_lock = threading.Lock()

    def record(self, *call) -> None:
        with self._rec_lock:
            self.calls.append(call)

    def _lock_impl(self, device, host, size, first, read_only):
        self.record("lock", device, host, size, first)
        addr = super()._lock_impl(device, host, size, first, read_only)
        exc, self.fail_after_pin = self.fail_after_pin, None
        if exc is not None:
            raise exc
        return addr

    def _unlock_impl(self, device, host, size, last):
        self.record("unlock", device, host, size, last)
        super()._unlock_impl(device, host, size, last)

    def of(self, kind: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == kind]


class NoImagePlugin(HostPlugin):
    """Host plugin named 'noimage' whose devices accept no image (a device a kernel has
    no binary for)."""

    name = "noimage"

    def check_binary(self, binary, dev=None):
        raise OffloadError(ErrorCode.INVALID_BINARY, "the noimage double loads no images")


class ShortCopyDevice(HostDevice):
    def _retrieve_impl(self, host, tgt, size, queue, pinned):
        super()._retrieve_impl(host, tgt, max(0, size - 1), queue, pinned)


class ShortCopyPlugin(HostPlugin):
    """Host plugin whose copies back lose their last byte (the conformance suite must
    catch it)."""

    name = "shortcopy"
    device_class = ShortCopyDevice


class ForeignErrorDevice(HostDevice):
    def _alloc_impl(self, size, kind):
        if size == 1:
            raise ValueError("a hook that fails with something else than OffloadError")
        return super()._alloc_impl(size, kind)


class ForeignErrorPlugin(HostPlugin):
    """Host plugin whose allocation hook raises a foreign exception."""

    name = "foreignerror"
    device_class = ForeignErrorDevice


class PitchedDevice(RecordingDevice):
    """A device with 2-D copies (as cuMemcpy2DAsync) and staging buffers, on host memory."""

    def _copy_2d_impl(self, to_device, tgt, tgt_pitch, host, host_pitch, width, height,
                      queue, pinned=None):
        self.plugin.record("copy2d", to_device, host, host_pitch, width, height,
                           pinned is not None)
        if self.plugin.refuse_2d:
            self.plugin.refuse_2d -= 1
            return False
        dst, src = (tgt, host) if to_device else (host, tgt)
        dp, sp = (tgt_pitch, host_pitch) if to_device else (host_pitch, tgt_pitch)
        _bytes_at(dst, (height, width), dp)[...] = _bytes_at(src, (height, width), sp)
        return True

    def _alloc_staging_impl(self, size):
        addr = super()._alloc_impl(size, None)
        self.plugin.record("staging buffer", addr, size)
        return addr, None

    def _free_staging_impl(self, addr, queue):
        from offload.plugins import host
        host._libc.free(host._ffi.cast("void *", addr))


class PitchedPlugin(RecordingPlugin):
    """The recording double with 2-D copies; unpinned blocks of 256 KiB and more go
    through staging buffers of 64 KiB."""

    name = "pitched"
    device_class = PitchedDevice
    staging_threshold = 256 << 10
    staging_chunk = 64 << 10

    def __init__(self, config):
        super().__init__(config)
        self.refuse_2d = 0             # this many next 2-D copies are refused


class BouncingPlugin(PitchedPlugin):
    """The pitched double staging every unpinned copy from the device, small ones too
    (as the CUDA plugin, whose driver sleeps in a copy into pageable memory)."""

    name = "bouncing"
    stage_small_retrieves = True
