"""GenericPlugin: the plugin table, implemented once (LLVM's GenericPluginTy), and the
names a vendor plugin builds on.

A vendor plugin subclasses GenericPlugin and GenericDevice (generic_device.py) and
fills in the `_*_impl` hooks (device_hooks.py and the plugin's below). Reference
counting, overlap rules, the transfer path (transfers.py), queues, the kernel cache
and the device-memory pool live here and in the modules beside it (queues, staging,
memory_pool, args), never in a vendor file.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from .. import _accel, locks
from ..config import Config, LockMapped
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..pinned import Kind, PinnedMap
from ._libc import memmove
from .args import GenericKernel, check_kernel_args, check_kernel_call, pack_scalar
from .generic_device import ROUTE_KEYS, GenericDevice, Interrupts
from .memory_pool import AllocKind
from .transfers import Transfers, contiguous_tail, strided_rows

__all__ = ["AllocKind", "GenericDevice", "GenericKernel", "GenericPlugin", "Interrupts",
           "check_kernel_args", "contiguous_tail", "memmove", "pack_scalar", "strided_rows",
           "ROUTE_KEYS"]

DeviceT = TypeVar("DeviceT", bound=GenericDevice)


class GenericPlugin(Transfers, Generic[DeviceT]):
    """The plugin table (docs/design.md §3); vendors override the hooks."""

    name = "generic"
    #: plugins are ordered by priority, lowest first: GPUs before the host
    priority = 50
    device_class: type[DeviceT]
    #: copies on a queue may still run after the call returns (GPU plugins)
    asynchronous = False
    #: freed device memory kept for reuse by an allocation of the same size, at most
    #: this many bytes (0: none); given back when an allocation runs out of memory
    device_pool_bytes = 0
    #: unpinned pieces of at least this many bytes go through staging (None: never)
    staging_threshold: int | None = None
    staging_chunk = 8 << 20
    staging_lanes = 8
    #: unpinned copies from the device below the threshold are staged too (one buffer,
    #: its queue polled): for a driver whose own copy into pageable memory waits by
    #: sleeping (CUDA under CU_CTX_SCHED_BLOCKING_SYNC: ~40 us to wake for 8 bytes)
    stage_small_retrieves = False
    #: the kind of clang OpenMP device image its devices run ("x86_64", "nvptx"; None)
    omp_image_kind: str | None = None
    #: pinned pieces of a copy are split at multiples of this address (None: never), for
    #: drivers that pin large ranges in several registrations a copy may not span
    pin_split: int | None = None

    def __init__(self, config: Config):
        self.config = config
        self.pinned = PinnedMap(_accel.new_lock(self.config))
        self.reason = ""               # why this plugin has no devices
        self._devices: list[DeviceT | None] = []
        self._lock = locks.new_lock()
        self._count: int | None = None

    # ---- vendor hooks -----------------------------------------------------
    def _init_impl(self) -> int:
        """Load the driver; return the number of devices (raise to say why none)."""
        return 0

    def _deinit_impl(self) -> None: ...

    def check_binary(self, binary: Binary, dev: DeviceT | None = None) -> None:
        """Raise INVALID_BINARY naming the mismatch unless `binary` runs on dev
        (on some device of this plugin when dev is None)."""
        raise OffloadError(ErrorCode.INVALID_BINARY, f"plugin {self.name} loads no images")

    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"plugin {self.name} cannot pin memory")

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None: ...

    def _is_pinned_impl(self, host: int, size: int) -> tuple[int, int, int] | None:
        return None

    def pin_is_read_only(self, host: int) -> bool:
        """Whether the pin made at `host` only allows reading (CUDA registrations of
        read-only pages); a writable use cannot share it."""
        return False

    def architecture(self, d: int = 0) -> str | None:
        """The architecture name of device d (e.g. 'sm_90', 'gfx90a'); None if unknown."""
        return None

    def locked_pages(self) -> int:
        """Pages this plugin has page-locked itself (0 where the driver keeps count)."""
        return 0

    # ---- PinDriver, for PinnedMap -----------------------------------------
    def pin(self, device: int, host: int, size: int, first: bool, read_only: bool) -> int:
        return self._lock_impl(device, host, size, first, read_only)

    def unpin(self, device: int, host: int, size: int, last: bool) -> None:
        self._unlock_impl(device, host, size, last)

    def query(self, host: int, size: int) -> tuple[int, int, int] | None:
        return self._is_pinned_impl(host, size)

    # ---- the table --------------------------------------------------------
    def number_of_devices(self) -> int:
        if self._count is None:
            with self._lock:
                if self._count is None:
                    try:
                        n = self._init_impl()
                    except OffloadError as exc:
                        self.reason = str(exc)
                        n = 0
                    except OSError as exc:
                        self.reason = f"driver library not loadable: {exc}"
                        n = 0
                    self._devices = [None] * n
                    self._count = n
        return self._count

    def init_device(self, d: int) -> DeviceT:
        try:
            dev = self._devices[d]
        except (IndexError, TypeError):
            dev = None
        if dev is not None and d >= 0:
            return dev
        if not 0 <= d < self.number_of_devices():
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"plugin {self.name} has no device {d}")
        with self._lock:
            dev = self._devices[d]
            if dev is None:
                dev = self.device_class(self, d)
                dev._init_impl()
                self._devices[d] = dev
        return dev

    device = init_device

    def initialized_devices(self) -> list[DeviceT]:
        return [d for d in self._devices if d is not None]

    def is_valid_binary(self, binary: Binary, d: int | None = None) -> bool:
        """Whether `binary` runs on device d (on this plugin's devices when d is None)."""
        try:
            self.check_binary(binary, None if d is None else self.device(d))
            return True
        except OffloadError:
            return False

    def load_binary(self, d: int, binary: Binary) -> Any:
        return self.device(d).load(binary)

    def data_alloc(self, d: int, size: int, kind: AllocKind = AllocKind.DEVICE) -> int:
        dev = self.device(d)
        addr = dev.alloc(size, kind)
        if kind is AllocKind.HOST:
            try:
                self.pinned.insert_allocated(addr, size, d, self._host_alloc_address(d, addr))
            except BaseException:
                dev.free(addr)
                raise
        return addr

    def _host_alloc_address(self, d: int, addr: int) -> int:
        """Device-accessible address of memory from _alloc_impl(HOST)."""
        return addr

    def data_delete(self, d: int, addr: int, kind: AllocKind = AllocKind.DEVICE,
                    idle: bool = False) -> None:
        dev = self.device(d)
        if kind is AllocKind.HOST and dev.allocation(addr) is not None:
            self.pinned.remove_allocated(addr)
        dev.free(addr, kind, idle)

    def data_lock(self, d: int, host: int, size: int, owner: Any = None,
                  read_only: bool = False) -> int:
        addr = self.pinned.acquire(self, host, size, d, kind=Kind.USER, owner=owner,
                                   read_only=read_only)
        assert addr is not None             # create=True: pinned or raised
        return addr

    def data_unlock(self, d: int, host: int) -> None:
        self.pinned.release(self, host, d)

    def data_notify_mapped(self, d: int, host: int, size: int, owner: Any = None,
                           read_only: bool = False) -> int | None:
        """A new mapping of [host, host+size): take a reference on a pinned entry
        containing it, or pin it per LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS.
        Returns the device-accessible address, or None when it stays unpinned."""
        mode = self.config.lock_mapped
        if size <= 0 or (mode is LockMapped.OFF and not self.pinned._starts):
            return None                 # nothing pinned, nothing to pin: no lock taken
        try:
            return self.pinned.acquire(self, host, size, d, kind=Kind.MAPPED, owner=owner,
                                       read_only=read_only, create=mode is not LockMapped.OFF,
                                       partial_ok=True)
        except OffloadError:
            if mode is LockMapped.MANDATORY:
                raise
            return None

    def data_notify_unmapped(self, d: int, host: int) -> None:
        self.pinned.release(self, host, d, what="mapped pinned buffer", kind=Kind.MAPPED)

    def launch_kernel(self, d: int, binary: Binary, name: str, args: Sequence[Any],
                      teams: int | None = None, threads: int | None = None,
                      queue: Any = None, shared_mem: int = 0) -> None:
        """Launch kernel `name` of `binary`; without a queue, returns when it finished."""
        dev = self.device(d)
        dev.launch(dev.kernel(binary, name), args, teams, threads, queue, shared_mem)

    def check_launch(self, d: int, binary: Binary, name: str,
                     args: Sequence[Any]) -> GenericKernel:
        """Kernel `name` of `binary` (loaded first), after refusing `args` (arrays and
        scalars, before mapping) that do not fit its parameters; for GenericDevice.launch."""
        k = self.device(d).kernel(binary, name)
        check_kernel_call(k, args)
        return k

    def synchronize(self, d: int, queue: Any) -> None:
        self.device(d)._sync_impl(queue)

    def query_async(self, d: int, queue: Any) -> bool:
        return self.device(d)._query_impl(queue)

    def device_info(self, d: int) -> dict:
        return self.device(d)._info_impl()

    def is_accessible(self, d: int, host: int, size: int) -> bool:
        return self.device(d)._is_accessible_impl(host, size)

    # ---- teardown ---------------------------------------------------------
    def deinit(self) -> None:
        """Drain queues, free device memory, unpin what we pinned, release contexts."""
        devices = self.initialized_devices()
        for dev in devices:
            dev.drain()
            dev.free_all((AllocKind.DEVICE, AllocKind.SHARED))
            dev.trim_pool()
        for e in self.pinned.clear():                    # alloc_host memory is freed below
            devs = sorted(e.ours)
            owned = e.kind not in (Kind.EXTERNAL, Kind.ALLOC_HOST)
            for i, d in enumerate(devs):
                try:
                    self._unlock_impl(d, e.host, e.size, last=owned and i == len(devs) - 1)
                except OffloadError:
                    pass
        waiting = False
        for dev in devices:
            dev.free_all((AllocKind.HOST,))
            dev.staging.close()
            # a device whose memory device_array views still use keeps its context until
            # the last view goes (the plugin's own teardown is left to process exit then)
            if dev.exported.defer(dev._deinit_impl):
                waiting = True
            else:
                dev._deinit_impl()
        if not waiting:
            self._deinit_impl()

    def forget(self) -> None:
        """After fork(): drop every record without a driver call."""
        self.pinned = PinnedMap(_accel.new_lock(self.config))
        self._devices = []
        self._count = None
