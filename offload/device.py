"""Device: one per plugin device, with its mapping table; lock/unlock dispatch."""
from __future__ import annotations

import contextlib
import weakref
from typing import Any

from . import tracing
from .config import Config
from .errors import ErrorCode, OffloadError
from .image import Binary, Kernel
from .mapping import MappingTable
from .plugins.common import AllocKind, GenericKernel, GenericPlugin

_KERNELS_KEPT = 256          # kernels remembered per device (Device.kernel_for)


class Device:
    """A global device number bound to (plugin, local id)."""

    def __init__(self, number: int, plugin: GenericPlugin, local_id: int, config: Config):
        self.number = number
        self.plugin = plugin
        self.local_id = local_id
        self.table = MappingTable(plugin, local_id, number, config.info)
        #: the plugin's device object (initialised before this Device is made)
        self.generic = plugin.device(local_id)
        # per image, the binary this device runs; weak, so a dead image's id is not reused
        self._binaries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._fallbacks: weakref.WeakSet = weakref.WeakSet()      # images reported once
        # kernel -> the plugin's kernel, loaded; bounded (it keeps images alive)
        self._kernels: dict[Kernel, GenericKernel] = {}

    def __repr__(self) -> str:
        return f"<Device {self.number}: {self.plugin.name} #{self.local_id}>"


    # ---- pinning (targetLockExplicit / targetUnlockExplicit) ---------------
    def lock(self, host: int, size: int, owner: Any = None, read_only: bool = False) -> int:
        return self.plugin.data_lock(self.local_id, host, size, owner, read_only)

    def unlock(self, host: int) -> None:
        self.plugin.data_unlock(self.local_id, host)

    # ---- memory: the table's one interface to it (mapping/memory.py tells the tool) ----
    def alloc(self, size: int, kind: AllocKind = AllocKind.DEVICE) -> int:
        return self.table.memory.alloc(size, kind)

    def free(self, addr: int, kind: AllocKind = AllocKind.DEVICE, idle: bool = False) -> None:
        """Free device memory; `idle`: no queued work uses it any more (no wait)."""
        self.table.memory.free(addr, kind, idle)

    def submit(self, tgt: int, host: int, size: int, queue: Any = None) -> None:
        self.table.memory.submit(tgt, host, size, queue)

    def retrieve(self, host: int, tgt: int, size: int, queue: Any = None) -> None:
        self.table.memory.retrieve(host, tgt, size, queue)

    def fill(self, tgt: int, value: int, size: int) -> None:
        self.plugin.data_fill(self.local_id, tgt, value, size)

    def exchange(self, src: int, dst_device: Device, dst: int, size: int,
                 queue: Any = None) -> bool:
        """A device-to-device copy, when the plugins can make it (False: they cannot).
        Told to a tool, once made, as LLVM tells it: a transfer from device between two
        devices."""
        done = self.plugin.data_exchange(self.local_id, src, dst_device.plugin,
                                         dst_device.local_id, dst, size, queue)
        if done:
            tracing.note(tracing.FROM_DEVICE, src, self.number, dst, dst_device.number, size)
        return done

    def check_range(self, addr: int, size: int, what: str) -> None:
        """INVALID_VALUE when [addr, addr+size) starts inside one of this device's
        allocations and runs past its end (addresses we did not allocate are not checked)."""
        found = self.generic.containing(addr)
        if found is None:
            g = self.generic
            known = not g.host_memory or g.unified or self.table.holds_device_range(addr, size)
            if not known:
                # beyond LLVM (whose host plugin copies and crashes): the host plugin
                # knows every address it gave out
                raise OffloadError(ErrorCode.INVALID_VALUE,
                                   f"{what}: 0x{addr:x} ({size} bytes) is in no allocation "
                                   f"and no mapping of device {self.number}; pass an address "
                                   f"omp_target_alloc or omp_get_mapped_ptr gave for it")
            return
        if addr + size > found[0] + found[1]:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"{what}: {size} bytes at 0x{addr:x} run past the end of the "
                               f"{found[1]}-byte allocation at 0x{found[0]:x} on device "
                               f"{self.number}")

    def is_device_memory(self, addr: int) -> bool:
        return self.generic.allocation(addr) is not None

    def is_accessible(self, host: int, size: int) -> bool:
        return self.plugin.is_accessible(self.local_id, host, size)

    # ---- queues -----------------------------------------------------------
    def get_queue(self) -> Any:
        return self.generic.get_queue()

    def release_queue(self, queue: Any) -> None:
        self.generic.release_queue(queue)

    def queue(self, queue: Any | None = None) -> contextlib.AbstractContextManager[Any]:
        """`with dev.queue() as q:` a queue of our own, synchronized and given back at the
        end; `dev.queue(q)` uses the caller's queue."""
        return self.generic.queue(queue)

    def synchronize(self, queue: Any) -> None:
        self.plugin.synchronize(self.local_id, queue)

    # ---- kernels ----------------------------------------------------------
    def binary_for(self, kernel: Kernel) -> Binary | None:
        """The binary of `kernel`'s image this device runs (None if none fits)."""
        key = kernel.image
        found = self._binaries.get(key, self)
        if found is not self:
            return found
        found = next((b for b in kernel.image.binaries
                      if self.plugin.is_valid_binary(b, self.local_id)), None)
        self._binaries[key] = found
        return found

    def kernel_for(self, kernel: Kernel) -> GenericKernel | None:
        """The plugin's kernel for `kernel` (its binary loaded on this device), or None
        when the image holds no binary for this device."""
        k = self._kernels.get(kernel)
        if k is None:
            binary = self.binary_for(kernel)
            if binary is None:
                return None
            k = self.generic.kernel(binary, kernel.name)
            if len(self._kernels) >= _KERNELS_KEPT:
                self._kernels.clear()
            self._kernels[kernel] = k
        return k

    def check_binary(self, kernel: Kernel) -> Binary:
        b = self.binary_for(kernel)
        if b is None:
            kinds = ", ".join(x.describe() for x in kernel.image.binaries)
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"no binary for device {self.number} ({self.plugin.name}) in the "
                               f"image of kernel '{kernel.name}' (it holds: {kinds})")
        return b

    def note_fallback(self, image: Any) -> bool:
        """True the first time `image` falls back to the host from this device."""
        if image in self._fallbacks:
            return False
        self._fallbacks.add(image)
        return True

    def info(self) -> dict:
        return self.plugin.device_info(self.local_id)

    @property
    def stats(self) -> dict:
        return self.generic.stats
