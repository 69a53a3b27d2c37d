"""GenericDevice: one device of a plugin, implemented once (LLVM's GenericDeviceTy):
allocations through the device-memory pool, loaded images and kernels, queues and
events, staging buffers, route counters, record/replay's arena and clang OpenMP images;
vendors fill the `_*_impl` hooks (device_hooks.py)."""
from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from .. import _accel, profile, tracing
from ..config import LockMapped
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from .accel_specs import BOUNCE_BYTES, SPECS_KEPT, Copier, LaunchSpec, OmpLaunchPlan
from .args import GenericKernel, check_kernel_args
from .device_hooks import DeviceHooks
from .exported import ExportedBlocks
from .memory_pool import AllocKind, DevicePool
from .queues import Queues
from .record_replay import Arena
from .staging import Staging
from .waits import Interrupts

__all__ = ["ROUTE_KEYS", "GenericDevice", "Interrupts"]



_REPLAY_ROOM = 64 << 20      # record/replay: room beyond the recorded memory when replaying


#: GenericDevice.stats's byte counters (staged bytes are also counted as unpinned)
ROUTE_KEYS = ("to pinned", "to unpinned", "from pinned", "from unpinned", "to staged",
              "from staged", "peer")
_OPS = {k: f"{k} ops" for k in ROUTE_KEYS}


class GenericDevice(DeviceHooks):
    """One device of a plugin: allocations, loaded images and kernels, queues, staging."""

    plugin: Any
    #: device memory is host memory and a synchronous copy is a memcpy (the host plugin):
    #: MappingTable may then run its single-range paths in C (offload/_accel.py)
    host_memory = False
    unified = False                  # a program on it requires unified_shared_memory

    def __init__(self, plugin: Any, local_id: int):
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

    def accel_copier(self) -> Copier | None:
        """How offload/accel_c may make an update's copy in C on this device (a Copier;
        see `accelerate` there), or None: the Python path."""
        return None

    def copier_bounce(self, streams: int) -> tuple[tuple[int, ...], int]:
        """A pinned bounce buffer for each of a copier's `streams` streams (one staging
        buffer, kept until the device closes, cut in pieces of at most BOUNCE_BYTES) and
        their bytes; ((), 0) when mapping a range may pin it
        (LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS): the core then maps none."""
        if self.plugin.config.lock_mapped is not LockMapped.OFF:
            return (), 0
        each = min(BOUNCE_BYTES, self.staging.chunk // streams)
        start = self.staging.kept_buffer()
        return tuple(start + i * each for i in range(streams)), each

    #: whether accel_launch may give specs (else regions do not ask)
    accel_launches = False

    def accel_launch(self, kernel: GenericKernel, teams: int | None, threads: int | None,
                     shared_mem: int) -> LaunchSpec | None:
        """How offload/accel_c may launch `kernel` with this geometry and wait, or None:
        the Python path (`launch`). Kept in kernel.fast_launch by geometry (at most
        SPECS_KEPT a kernel); the vendor makes it (`_accel_launch_impl`)."""
        key = (teams, threads, shared_mem)
        spec = kernel.fast_launch.get(key)
        if spec is None:
            spec = self._accel_launch_impl(kernel, teams, threads, shared_mem)
            if spec is not None and len(kernel.fast_launch) < SPECS_KEPT:
                kernel.fast_launch[key] = spec
        return spec

    def profile_clock(self) -> profile.DeviceClock | None:
        """The device's clock for the profile (made at first use), or None."""
        clock = self._clock
        if clock is None:
            clock = self._clock = profile.DeviceClock.of(self) or False
        return clock if isinstance(clock, profile.DeviceClock) else None


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
        if not self.omp_watched():
            return self._omp_launch_impl(program, name, args, teams, threads, tripcount)
        p = profile.active
        if p is not None:
            return p.kernel(self, self.plugin.name, self.id, name, len(args), teams, threads,
                            None, lambda q: self._omp_launch(program, name, args, teams,
                                                             threads, tripcount),
                            tripcount, device_clock=False)
        return self._omp_launch(program, name, args, teams, threads, tripcount)

    def omp_direct_call(self, program: Any, name: str, nargs: int,
                        teams: int, threads: int) -> Callable[..., Any] | None:
        """A callable running omp_launch's kernel to completion on its `nargs` arguments
        (the vendor's `_omp_direct_call_impl`), for a launch of the default geometry
        (no num_teams or thread_limit clause) while no profile or recording watches;
        else None (omp_launch runs it)."""
        if teams > 0 or threads > 0 or self.omp_watched():
            return None
        return self._omp_direct_call_impl(program, name, nargs)

    def omp_launch_plan(self, program: Any, name: str, teams: int, threads: int,
                        tripcount: int) -> OmpLaunchPlan | None:
        """How offload/accel_c may run omp_launch's kernel itself (the vendor's
        `_omp_launch_plan_impl`), or None: while a profile or a recording watches,
        omp_launch does it."""
        if not self.accel_launches or self.omp_watched():
            return None
        return self._omp_launch_plan_impl(program, name, teams, threads, tripcount)

    def omp_watched(self) -> bool:
        """Whether a profile or a kernel recording watches this device's launches."""
        return profile.active is not None or self.arena is not None

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

    def free(self, addr: int, kind: AllocKind | None = None, idle: bool = False) -> int:
        """Free `addr` (into the pool where it fits); `idle`: the caller waited for all
        work that used it, so the pool takes it without waiting for the queues."""
        pool = self.pool
        wait = self._wait_before_reuse and not idle
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
            if poolable and not wait and pool.give(addr, size):
                return size                             # kept for the next alloc
        if poolable and wait:
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
        if k.phases:
            with self.queue(queue) as q:            # in order on one queue, waited once
                for sub, fixed in k.phases:
                    if fixed is None:
                        self.launch(sub, args, teams, threads, q, shared_mem)
                    else:
                        self.launch(sub, args, fixed[0], fixed[1], q, 0)
            return
        p = profile.active
        if p is not None:
            p.kernel(self, self.plugin.name, self.id, k.name, len(args), teams, threads, queue,
                     lambda q: self._launch_impl(k, args, teams, threads, q, shared_mem))
        else:
            self._launch_impl(k, args, teams, threads, queue, shared_mem)

    def direct_call(self, k: GenericKernel, shared_mem: int = 0) -> Callable[..., Any] | None:
        """A callable running `k` to completion on device-ready arguments, as `launch`
        without a queue or geometry would (the vendor's `_direct_call_impl`): for a
        kernel of one phase while no profile watches launches; else None (`launch` runs
        it, and refuses a negative `shared_mem`)."""
        if k.phases or shared_mem < 0 or profile.active is not None:
            return None
        return self._direct_call_impl(k)

    def kernel(self, binary: Binary, name: str) -> GenericKernel:
        """Kernel `name` of `binary`, loading the binary first (both cached)."""
        key = (binary.digest, name)
        k = self._kernels.get(key)
        if k is None:
            phases = binary.phases.get(name)
            if phases:
                subs = tuple((self.kernel(binary, entry), fixed) for entry, fixed in phases)
                first = subs[0][0]
                k = GenericKernel(name, None, first.params, first.signature, first.types,
                                  phases=subs)
            else:
                k = self._kernel_impl(self.load(binary), binary, name)
            with self._lock:
                k = self._kernels.setdefault(key, k)
        return k
