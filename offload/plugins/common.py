"""GenericPlugin / GenericDevice: the plugin table, implemented once.

A vendor plugin subclasses both and fills in the `_*_impl` hooks. Reference
counting, overlap rules, splitting a transfer at pinned boundaries, the choice of
transfer path, queues, the kernel cache and the device-memory pool live here and in
the modules beside it (queues, staging, memory_pool, args), never in a vendor file.
"""
from __future__ import annotations

import bisect
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .. import _accel, profile, tracing
from ..config import Config, LockMapped
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..pinned import Kind, PinnedMap
from ._libc import _ffi as _libc_ffi
from ._libc import memmove
from .args import GenericKernel, check_kernel_args, check_kernel_call, pack_scalar
from .exported import ExportedBlocks
from .memory_pool import AllocKind, DevicePool
from .queues import Queues
from .record_replay import Arena
from .staging import Staging

__all__ = ["AllocKind", "GenericDevice", "GenericKernel", "GenericPlugin", "Interrupts",
           "check_kernel_args", "contiguous_tail", "memmove", "pack_scalar", "strided_rows"]


class Interrupts:
    """How a plugin's long waits notice Ctrl-C: the runtime installs `hook`, which raises
    KeyboardInterrupt in the main thread when one is pending; waits call `deliver()`."""

    hook: Callable[[], None] | None = None

    @staticmethod
    def deliver() -> None:
        hook = Interrupts.hook
        if hook is not None:
            hook()


_REPLAY_ROOM = 64 << 20      # record/replay: room beyond the recorded memory when replaying


#: GenericDevice.stats's byte counters (staged bytes are also counted as unpinned)
ROUTE_KEYS = ("to pinned", "to unpinned", "from pinned", "from unpinned", "to staged",
              "from staged", "peer")
_OPS = {k: f"{k} ops" for k in ROUTE_KEYS}


class GenericDevice:
    """One device of a plugin: allocations, loaded images and kernels, queues, staging."""

    plugin: GenericPlugin[Any]
    #: device memory is host memory and a synchronous copy is a memcpy (the host plugin):
    #: MappingTable may then run its plain paths in C (offload/_accel.py)
    host_memory = False
    unified = False                  # a program on it requires unified_shared_memory

    def __init__(self, plugin: GenericPlugin[Any], local_id: int):
        self.plugin = plugin
        self.id = local_id
        self._allocs: dict[int, tuple[int, AllocKind]] = {}
        self._alloc_starts: list[int] | None = []   # sorted keys of _allocs (None: stale)
        self._lock = _accel.new_lock(plugin.config)
        self._loaded: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], GenericKernel] = {}
        self._omp_programs: dict[bytes, Any] = {}   # clang OpenMP images loaded (C API)
        #: kernel record/replay's reserved block, once started (start_record_replay)
        self.arena: Arena | None = None
        self.queues = Queues(self)
        self.staging = Staging(self, plugin.staging_chunk, plugin.staging_lanes)
        self.pool = DevicePool(plugin.device_pool_bytes)
        #: blocks device_array views still use: freed only with their last view
        self.exported = ExportedBlocks(self._free_impl)
        # whether freed memory must wait for queued work before the pool hands it out
        self._wait_before_reuse = (type(self)._before_reuse_impl
                                   is not GenericDevice._before_reuse_impl)
        #: bytes moved, by direction and path: 'to pinned', 'to unpinned', 'from ...';
        #: of the unpinned, those through staging buffers ('to staged', 'from staged'); and
        #: device-to-device copies from this device ('peer'). offload.stats() reads them.
        #: With each, "<key> ops": the operations that moved them; and "pool hits": device
        #: allocations the pool served.
        self.stats = dict.fromkeys((*ROUTE_KEYS, *_OPS.values(), "pool hits"), 0)
        self._clock: profile.DeviceClock | bool | None = None   # profile_clock's (False: none)

    def count(self, key: str, nbytes: int) -> None:
        """One operation moved `nbytes` by route `key` (a key of `stats`)."""
        s = self.stats
        s[key] += nbytes
        s[_OPS[key]] += 1

    def accel_copier(self) -> tuple | None:
        """How offload/accel_c may make an update's copy in C on this device (see
        `accelerate` there), or None: the Python path."""
        return None

    #: whether accel_launch may give specs (else regions do not ask)
    accel_launches = False

    def accel_launch(self, kernel: GenericKernel, teams: int | None, threads: int | None,
                     shared_mem: int) -> tuple | None:
        """How offload/accel_c may launch `kernel` with this geometry and wait (kept in
        kernel.fast_launch by geometry), or None: the Python path (`launch`)."""
        return None

    # ---- vendor hooks -----------------------------------------------------
    def _init_impl(self) -> None: ...
    def _deinit_impl(self) -> None: ...
    def _alloc_impl(self, size: int, kind: AllocKind) -> int: raise NotImplementedError
    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None: raise NotImplementedError

    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: int | None) -> None:
        """Host -> device. `pinned` is the device-accessible address of `host` if pinned."""
        raise NotImplementedError

    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: int | None) -> None:
        raise NotImplementedError

    def _exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                       queue: Any) -> bool:
        """Device -> device; False when this pair needs the host in between."""
        return False

    def _load_impl(self, binary: Binary) -> Any: raise NotImplementedError

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        """Find kernel `name` in a loaded program (raise NOT_FOUND when absent)."""
        raise NotImplementedError

    def _copy_now_impl(self, to_device: bool, tgt: int, host: int, size: int) -> bool:
        """Copy pinned host memory to (or from) the device and wait for it, on a queue of
        the device's own, in one step; False, with nothing done, where the device has no
        such path (the caller then borrows a queue)."""
        return False

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any],
                     teams: int | None, threads: int | None, queue: Any,
                     shared_mem: int = 0) -> None:
        """Launch on `queue` (None: launch and wait); `shared_mem` bytes of dynamic
        shared (group) memory."""
        raise NotImplementedError

    def _unload_impl(self, program: Any) -> None:
        """Unload a program _load_impl made (one that lost a race to load first)."""

    def _before_reuse_impl(self) -> None:
        """Called before freed device memory goes to the pool: wait for any queued work
        that may still use it (the driver's own free would)."""

    # ---- events (defaults for plugins whose queues are synchronous) ---------
    def _event_create_impl(self) -> Any:
        """A new event, complete until recorded."""
        return None

    def _event_record_impl(self, event: Any, queue: Any) -> None:
        """Make `event` complete when `queue` reaches this point."""

    def _event_query_impl(self, event: Any) -> bool:
        return True

    def _event_sync_impl(self, event: Any) -> None:
        """Wait on the host until `event` is complete (interruptibly)."""

    def _queue_wait_event_impl(self, queue: Any, event: Any) -> None:
        """Make later work on `queue` wait for `event`, without blocking the host."""

    def _event_destroy_impl(self, event: Any) -> None: ...

    def _timing_event_impl(self) -> Any:
        """A new event whose completion the device timestamps, for the profile; None:
        the device has no clock of its own (the profile takes the host's)."""
        return None

    def _event_elapsed_ns_impl(self, start: Any, end: Any) -> int:
        """Device nanoseconds from timing event `start` to `end`, both complete."""
        raise NotImplementedError

    def profile_clock(self) -> profile.DeviceClock | None:
        """The device's clock for the profile (made at first use), or None."""
        clock = self._clock
        if clock is None:
            clock = self._clock = profile.DeviceClock.of(self) or False
        return clock if isinstance(clock, profile.DeviceClock) else None

    def _host_function_impl(self, queue: Any, fn: Callable[[], None]) -> bool:
        """Queue a host function on `queue`; False: the generic layer waits for the
        queue and calls it."""
        return False

    def _copy_2d_impl(self, to_device: bool, tgt: int, tgt_pitch: int, host: int,
                      host_pitch: int, width: int, height: int, queue: Any,
                      pinned: int | None = None) -> bool:
        """Queue one 2-D copy of `height` rows of `width` bytes between host rows
        `host_pitch` apart and device rows `tgt_pitch` apart (`pinned`: the device-
        accessible address of `host` where it is pinned); False when the device cannot
        (nothing was copied: the generic layer copies row by row)."""
        return False

    def _fill_impl(self, tgt: int, value: int, size: int, queue: Any) -> bool:
        """Set `size` bytes at device address `tgt` to `value` on the device, queued on
        `queue`; False when the device cannot (the generic layer then copies a filled
        host buffer)."""
        return False

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        """A pinned host buffer of `size` bytes the device can DMA from, and a queue."""
        raise NotImplementedError

    def _free_staging_impl(self, addr: int, queue: Any) -> None: ...

    # clang OpenMP device images (the C API's drop-in libomptarget): the plugin's
    # `omp_image_kind` says which kind it runs
    def _omp_load_impl(self, image: bytes, indirect: Sequence[tuple[int, str]]) -> Any:
        """Load a raw device image (`indirect`: its `declare target indirect` functions as
        (host address, entry name)); the loaded program."""
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"plugin {self.plugin.name} runs no clang OpenMP images")

    def _omp_global_impl(self, program: Any, name: str) -> int | None:
        """Device address of a global of a loaded image, or None."""
        return None

    def _omp_launch_impl(self, program: Any, name: str, args: Sequence[int],
                         teams: int, threads: int, tripcount: int) -> tuple[int, int, str]:
        """Run kernel `name` (pointer-sized arguments; LLVM's num_teams / thread_limit /
        trip count) to completion; how it ran, for LIBOMPTARGET_INFO: (blocks, threads,
        execution mode) as the plugin reports them."""
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"plugin {self.plugin.name} runs no clang OpenMP images")

    def _omp_requires_impl(self, flags: int) -> None:
        """Refuse `requires` flags this device cannot honour (by name)."""

    def _create_queue_impl(self) -> Any: return None
    def _destroy_queue_impl(self, queue: Any) -> None: ...
    def _sync_impl(self, queue: Any) -> None: ...
    def _query_impl(self, queue: Any) -> bool: return True
    def _info_impl(self) -> dict: return {}
    def _is_accessible_impl(self, host: int, size: int) -> bool: return False

    # ---- queues -----------------------------------------------------------
    def get_queue(self) -> Any:
        return self.queues.get()

    def release_queue(self, queue: Any) -> None:
        self.queues.release(queue)

    def queue(self, queue: Any | None = None) -> contextlib.AbstractContextManager[Any]:
        """`with dev.queue() as q:` a queue of our own, synchronized and given back at
        the end; `dev.queue(q)` uses the caller's."""
        return self.queues.borrow(queue)

    def sync_queue(self, queue: Any) -> None:
        """Wait for `queue` (interruptibly); raises the first error of its work."""
        self._sync_impl(queue)

    def query_queue(self, queue: Any) -> bool:
        return self._query_impl(queue)

    # ---- events -----------------------------------------------------------
    def event_create(self) -> Any:
        return self._event_create_impl()

    def event_record(self, event: Any, queue: Any) -> None:
        self._event_record_impl(event, queue)

    def event_query(self, event: Any) -> bool:
        return self._event_query_impl(event)

    def event_sync(self, event: Any) -> None:
        self._event_sync_impl(event)

    def queue_wait_event(self, queue: Any, event: Any) -> None:
        self._queue_wait_event_impl(queue, event)

    def event_destroy(self, event: Any) -> None:
        self._event_destroy_impl(event)

    def host_function(self, queue: Any, fn: Callable[[], None]) -> None:
        """Run `fn` when `queue` reaches this point (at once, after a wait for the
        queue, where the plugin cannot queue host work)."""
        if not self._host_function_impl(queue, fn):
            self._sync_impl(queue)
            fn()

    def drain(self) -> None:
        """Wait for every queue this device made."""
        self.queues.drain()

    # ---- clang OpenMP images ----------------------------------------------------
    def omp_load(self, image: bytes, indirect: Sequence[tuple[int, str]] = ()) -> Any:
        """A clang OpenMP device image loaded on this device, once per image."""
        program = self._omp_programs.get(image)
        if program is None:
            mine = self._omp_load_impl(image, indirect)
            with self._lock:
                program = self._omp_programs.setdefault(image, mine)
            if program is mine:
                tracing.image_loaded(self, image)
        return program

    def omp_global(self, program: Any, name: str) -> int | None:
        return self._omp_global_impl(program, name)

    def omp_launch(self, program: Any, name: str, args: Sequence[int], teams: int,
                   threads: int, tripcount: int) -> tuple[int, int, str]:
        p = profile.active
        if p is not None:
            return p.kernel(self, self.plugin.name, self.id, name, len(args), teams, threads,
                            None, lambda q: self._omp_launch(program, name, args, teams,
                                                             threads, tripcount),
                            tripcount, device_clock=False)
        return self._omp_launch(program, name, args, teams, threads, tripcount)

    def _omp_launch(self, program: Any, name: str, args: Sequence[int], teams: int,
                    threads: int, tripcount: int) -> tuple[int, int, str]:
        arena = self.arena
        if arena is None:
            return self._omp_launch_impl(program, name, args, teams, threads, tripcount)
        image = next((i for i, p in list(self._omp_programs.items()) if p is program), None)
        used = arena.used
        arena.before_launch(name, image)
        out = self._omp_launch_impl(program, name, args, teams, threads, tripcount)
        arena.after_launch(name, args, out[0], out[1], tripcount, used)
        return out

    def start_record_replay(self, size: int, vaddr: int, recording: bool,
                            save_output: bool) -> int:
        """Reserve `size` bytes for kernel recording (or replay): every later device
        allocation comes from them (offload.plugins.record_replay). Returns how far the
        block lies below `vaddr` (0 when it starts there or `vaddr` is 0): LLVM's
        ReqPtrArgOffset, by which a replay moves pointer arguments."""
        if size <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"record/replay memory size {size}: must be positive")
        if self.arena is not None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"record/replay already started on device {self.id} of "
                               f"plugin {self.plugin.name}")
        if not recording:                    # a replay's launch allocates too (LLVM reserves
            size += _REPLAY_ROOM             # nearly all the device's memory)
        self.trim_pool()
        self.pool.limit = 0                  # nothing cached: each block from the arena
        start = self._reserve_impl(size, vaddr)
        self.arena = Arena(start, size, recording, save_output, self.id,
                           lambda host, tgt, n: self.plugin.data_retrieve(self.id, host, tgt, n))
        return (vaddr - start) & (2**64 - 1) if vaddr and vaddr != start else 0

    def _reserve_impl(self, size: int, vaddr: int) -> int:
        """`size` bytes of device memory for record/replay, at `vaddr` where the device can
        place them there (LLVM's VA management), else anywhere."""
        return self._alloc_impl(size, AllocKind.DEVICE)

    def omp_requires(self, flags: int) -> None:
        self._omp_requires_impl(flags)
        self.unified = bool(flags & 0x8)        # requires unified_shared_memory

    # ---- allocations ------------------------------------------------------
    def alloc(self, size: int, kind: AllocKind) -> int:
        if size <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot allocate {size} bytes: size must be positive")
        if kind is AllocKind.DEVICE and self.arena is not None:
            addr = self.arena.take(size)
            if addr is None:
                raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                                   f"cannot allocate {size} bytes: the record/replay memory "
                                   f"of device {self.id} ({self.arena.size} bytes) is full")
            with self._lock:
                self._allocs[addr] = (size, kind)
                self._alloc_starts = None
            return addr
        if kind is AllocKind.DEVICE:
            with self._lock:
                addr = self.pool.take(size)
                if addr is not None:
                    self.stats["pool hits"] += 1
                    self._allocs[addr] = (size, kind)
                    self._alloc_starts = None
                    return addr
        try:
            addr = self._alloc_impl(size, kind)
        except OffloadError as exc:
            if exc.code is not ErrorCode.OUT_OF_RESOURCES or not self.trim_pool():
                raise
            addr = self._alloc_impl(size, kind)     # the pool gave memory back: again
        with self._lock:
            self._allocs[addr] = (size, kind)
            self._alloc_starts = None
        return addr

    def free(self, addr: int, kind: AllocKind | None = None) -> int:
        pool = self.pool
        with self._lock:
            rec = self._allocs.get(addr)
            if rec is None or (kind is not None and rec[1] is not kind):
                what = f" with kind {kind.value}" if kind else ""
                raise OffloadError(ErrorCode.NOT_FOUND,
                                   f"0x{addr:x} is not memory allocated{what} on device "
                                   f"{self.id} of plugin {self.plugin.name}")
            del self._allocs[addr]
            self._alloc_starts = None
            size, kind = rec
            if self.exported.adopt(addr, size, kind):
                return size                             # freed with its last view
            if self.arena is not None and self.arena.holds(addr):
                return size                             # the block is kept whole
            poolable = kind is AllocKind.DEVICE and size <= pool.limit
            if poolable and not self._wait_before_reuse and pool.give(addr, size):
                return size                             # kept for the next alloc
        if poolable and self._wait_before_reuse:
            self._before_reuse_impl()                   # queued work may still write it
            with self._lock:
                if pool.give(addr, size):
                    return size
        self._free_impl(addr, size, kind)
        return size

    def trim_pool(self) -> int:
        """Give the pool's cached device memory back to the driver; bytes freed."""
        with self._lock:
            blocks = self.pool.trim()
        for addr, size in blocks:
            self._free_impl(addr, size, AllocKind.DEVICE)
        return sum(size for _, size in blocks)

    def allocation(self, addr: int) -> tuple[int, AllocKind] | None:
        return self._allocs.get(addr)

    def containing(self, addr: int) -> tuple[int, int] | None:
        """(start, size) of the live allocation holding `addr`, or None."""
        with self._lock:
            starts = self._alloc_starts
            if starts is None:                  # sorted again only when asked
                starts = self._alloc_starts = sorted(self._allocs)
            i = bisect.bisect_right(starts, addr) - 1
            if i < 0:
                return None
            start = starts[i]
            size = self._allocs[start][0]
            return (start, size) if addr < start + size else None

    def live_allocations(self) -> int:
        """Allocations made and not freed (blocks kept by the pool not counted)."""
        with self._lock:
            return len(self._allocs)

    def free_all(self, kinds: tuple[AllocKind, ...]) -> None:
        """Free what is still allocated with one of `kinds` (teardown)."""
        with self._lock:
            gone = {a: r for a, r in self._allocs.items() if r[1] in kinds}
            for a in gone:
                del self._allocs[a]
            self._alloc_starts = sorted(self._allocs)
        for addr, (size, kind) in gone.items():
            if not self.exported.adopt(addr, size, kind):     # else freed with its views
                self._free_impl(addr, size, kind)

    # ---- images and kernels -------------------------------------------------
    def load(self, binary: Binary) -> Any:
        prog = self._loaded.get(binary.digest)
        if prog is None:
            mine = self._load_impl(binary)
            with self._lock:
                prog = self._loaded.setdefault(binary.digest, mine)
            if prog is not mine:                # another thread loaded it first
                self._unload_impl(mine)
        return prog

    def launch(self, k: GenericKernel, args: Sequence[Any], teams: int | None = None,
               threads: int | None = None, queue: Any = None, shared_mem: int = 0) -> None:
        """Launch kernel `k` with device-ready `args` (addresses and scalars); without a
        queue, returns when it finished."""
        if len(args) != len(k.params):
            check_kernel_args(k.name, len(k.params), len(args), k.signature)
        if shared_mem < 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"shared_mem={shared_mem}: expected a byte count >= 0")
        p = profile.active
        if p is not None:
            p.kernel(self, self.plugin.name, self.id, k.name, len(args), teams, threads, queue,
                     lambda q: self._launch_impl(k, args, teams, threads, q, shared_mem))
        else:
            self._launch_impl(k, args, teams, threads, queue, shared_mem)

    def kernel(self, binary: Binary, name: str) -> GenericKernel:
        """Kernel `name` of `binary`, loading the binary first (both cached)."""
        key = (binary.digest, name)
        k = self._kernels.get(key)
        if k is None:
            k = self._kernel_impl(self.load(binary), binary, name)
            with self._lock:
                k = self._kernels.setdefault(key, k)
        return k


DeviceT = TypeVar("DeviceT", bound=GenericDevice)


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


class GenericPlugin(Generic[DeviceT]):
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
        self._lock = threading.Lock()
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

    def data_delete(self, d: int, addr: int, kind: AllocKind = AllocKind.DEVICE) -> None:
        dev = self.device(d)
        if kind is AllocKind.HOST and dev.allocation(addr) is not None:
            self.pinned.remove_allocated(addr)
        dev.free(addr, kind)

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
        if self._direct(size) and (queue is not None or not self.asynchronous):
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
        if self._direct(size) and (queue is not None or not self.asynchronous):
            dev._retrieve_impl(host, tgt, size, queue, None)
            dev.count("from unpinned", size)
        else:
            self._transfer(False, dev, tgt, host, size, queue)

    def _direct(self, size: int) -> bool:
        """Whether a copy of `size` bytes is one plain copy: nothing is pinned (no piece
        to split off) and it is below the staging threshold."""
        stage = self.staging_threshold
        return not self.pinned._starts and (stage is None or size < stage)

    def _crosses_split(self, host: int, size: int) -> bool:
        """Whether [host, host+size) spans two cells of the plugin's pin_split grid (one
        copy may not cross a registration boundary)."""
        grid = self.pin_split
        if not grid:
            return False
        return host // grid != (host + size - 1) // grid

    def _transfer(self, to_device: bool, dev: DeviceT, tgt: int, host: int, size: int,
                  queue: Any) -> None:
        if queue is None and self.asynchronous:
            pieces = self.pinned.translate(host, size, dev.id)
            if len(pieces) == 1 and pieces[0][2] is not None and \
                    not self._crosses_split(host, size) and \
                    dev._copy_now_impl(to_device, tgt, host, size):
                dev.count(_STAT_KEYS[to_device, False], size)   # pinned, in one step
                return
            with dev.queue() as q:             # ours: synchronized before we return
                self._transfer_on(dev, to_device, tgt, host, size, q)
        else:
            self._transfer_on(dev, to_device, tgt, host, size, queue)

    def _transfer_on(self, dev: DeviceT, to_device: bool, tgt: int, host: int, size: int,
                     q: Any) -> None:
        stage = self.staging_threshold
        if self._direct(size):
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
            if via is None and stage is not None and n >= stage:
                if q is not None:          # staging runs on queues of its own: what
                    dev._sync_impl(q)      # was enqueued before (a kernel) goes first
                dev.staging.copy(to_device, tgt + off, host + off, n)
                dev.count("to staged" if to_device else "from staged", n)
            elif to_device:
                dev._submit_impl(tgt + off, host + off, n, q, via)
            else:
                dev._retrieve_impl(host + off, tgt + off, n, q, via)
            dev.count(_STAT_KEYS[to_device, via is None], n)

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

    def _strided_2d(self, dev: DeviceT, to_device: bool, host: int, tgt: int,
                    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
        """The block as 2-D copies (one per outer index of a 3-D block); False when it
        is not one or the device has no 2-D copies."""
        k, row = contiguous_tail(shape, strides, itemsize)
        if not 1 <= k <= 2 or type(dev)._copy_2d_impl is GenericDevice._copy_2d_impl:
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
        stage = self.staging_threshold
        if not pinned and stage is not None and nbytes >= stage:
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

    def data_exchange(self, src_d: int, src: int, dst_plugin: GenericPlugin, dst_d: int,
                      dst: int, size: int, queue: Any = None) -> bool:
        dev = self.device(src_d)
        p = profile.active
        if p is not None:
            return bool(p.copy(dev, self.name, src_d, None, size, queue,
                               lambda q: self._data_exchange(dev, dst_plugin, dst_d, src,
                                                             dst, size, q)))
        return self._data_exchange(dev, dst_plugin, dst_d, src, dst, size, queue)

    @staticmethod
    def _data_exchange(dev: Any, dst_plugin: GenericPlugin, dst_d: int, src: int, dst: int,
                       size: int, queue: Any) -> bool:
        done = dev._exchange_impl(src, dst_plugin.device(dst_d), dst, size, queue)
        if done:
            dev.count("peer", size)
        return done

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
