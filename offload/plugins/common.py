"""GenericPlugin / GenericDevice: the plugin table, implemented once.

A vendor plugin subclasses both and fills in the `_*_impl` hooks. Reference
counting, overlap rules, splitting a transfer at pinned boundaries and the
choice of transfer path live here, never in a vendor file.
"""
from __future__ import annotations

import concurrent.futures
import enum
import os
import struct
import threading
from typing import Any, Optional, Sequence

import cffi

from ..config import Config, LockMapped
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..pinned import Kind, PinnedMap


# memmove typed with integer addresses: the same calling convention as pointers on
# the LP64 ABIs we run on, and no cdata casts on the hot path
_ffi = cffi.FFI()
_ffi.cdef("void *memmove(uintptr_t, uintptr_t, size_t);")
_libc = _ffi.dlopen(None)


def memmove(dst: int, src: int, size: int) -> None:
    """memmove between two integer host addresses (the GIL is released)."""
    _libc.memmove(dst, src, size)


def check_kernel_args(name: str, expected: int, given: int, signature: str) -> None:
    """The one error for a kernel called with the wrong number of arguments."""
    if expected != given:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{name}' takes {expected} argument(s) ({signature}), "
                           f"{given} given")


def pack_scalar(value: Any, size: int, what: str) -> bytes:
    """A kernel argument's bytes: a device address or integer, a float, or raw bytes of
    the parameter's size (little-endian, as on every device we drive)."""
    fmt = None
    if isinstance(value, float):
        fmt = {4: "<f", 8: "<d"}.get(size)
    elif isinstance(value, (int, bool)):
        fmt = {1: "<B", 2: "<h", 4: "<i", 8: "<q"}.get(size)
        if size in (4, 8) and value >= 1 << (8 * size - 1):
            fmt = fmt.upper()                       # an unsigned value (an address)
    elif isinstance(value, (bytes, bytearray)) and len(value) == size:
        return bytes(value)
    if fmt is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: cannot pass {type(value).__name__} as {size} bytes"
                           f"{'; pass bytes for aggregates' if size not in (1, 2, 4, 8) else ''}")
    return struct.pack(fmt, value)


class AllocKind(enum.Enum):
    DEVICE = "device"
    HOST = "host"        # pinned host memory (llvm_omp_target_alloc_host)
    SHARED = "shared"    # managed memory (llvm_omp_target_alloc_shared)


class GenericDevice:
    """One device of a plugin: allocations, loaded images, queues."""

    def __init__(self, plugin: "GenericPlugin", local_id: int):
        self.plugin = plugin
        self.id = local_id
        self._allocs: dict[int, tuple[int, AllocKind]] = {}
        self._lock = threading.Lock()
        self._loaded: dict[str, Any] = {}
        self._queues: list[Any] = []
        self._all_queues: list[Any] = []
        #: bytes moved, by direction and path: 'to pinned', 'to unpinned', 'from ...'
        self.stats = {"to pinned": 0, "to unpinned": 0, "from pinned": 0, "from unpinned": 0}
        self._lane_sets: list[list[tuple[int, Any]]] = []    # staging buffers, all made
        self._free_lanes: list[list[tuple[int, Any]]] = []   # ... and those not in use
        self._stage_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool: dict[int, list[int]] = {}        # freed device memory, by exact size
        self._pool_bytes = 0

    # ---- vendor hooks -----------------------------------------------------
    def _init_impl(self) -> None: ...
    def _deinit_impl(self) -> None: ...
    def _alloc_impl(self, size: int, kind: AllocKind) -> int: raise NotImplementedError
    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None: raise NotImplementedError

    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: Optional[int]) -> None:
        """Host -> device. `pinned` is the device-accessible address of `host` if pinned."""
        raise NotImplementedError

    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: Optional[int]) -> None:
        raise NotImplementedError

    def _exchange_impl(self, src: int, dst_device: "GenericDevice", dst: int, size: int,
                       queue: Any) -> bool:
        """Device -> device; False when this pair needs the host in between."""
        return False

    def _load_impl(self, binary: Binary) -> Any: raise NotImplementedError

    def _launch_impl(self, program: Any, binary: Binary, name: str, args: Sequence[Any],
                     teams: Optional[int], threads: Optional[int], queue: Any) -> None:
        raise NotImplementedError

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        """A pinned host buffer of `size` bytes the device can DMA from, and a queue."""
        raise NotImplementedError

    def _free_staging_impl(self, addr: int, queue: Any) -> None: ...

    def _create_queue_impl(self) -> Any: return None
    def _destroy_queue_impl(self, queue: Any) -> None: ...
    def _sync_impl(self, queue: Any) -> None: ...
    def _query_impl(self, queue: Any) -> bool: return True
    def _info_impl(self) -> dict: return {}
    def _is_accessible_impl(self, host: int, size: int) -> bool: return False

    # ---- queues -----------------------------------------------------------
    def get_queue(self) -> Any:
        with self._lock:
            if self._queues:
                return self._queues.pop()
        q = self._create_queue_impl()
        with self._lock:
            self._all_queues.append(q)
        return q

    def release_queue(self, queue: Any) -> None:
        with self._lock:
            self._queues.append(queue)

    # ---- staged transfers of unpinned memory ---------------------------------
    def _take_lanes(self, count: int) -> list[tuple[int, Any]]:
        """A set of at least `count` staging buffers with their queues, for one transfer
        alone (concurrent transfers get sets of their own; sets are reused)."""
        with self._lock:
            lanes = self._free_lanes.pop() if self._free_lanes else []
            if not lanes:
                self._lane_sets.append(lanes)
        while len(lanes) < count:
            lanes.append(self._alloc_staging_impl(self.plugin.staging_chunk))
        return lanes

    def _give_lanes(self, lanes: list[tuple[int, Any]]) -> None:
        with self._lock:
            self._free_lanes.append(lanes)

    def free_staging(self) -> None:
        """Stop the staging workers and free their buffers (teardown)."""
        pool, self._stage_pool = self._stage_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        sets, self._lane_sets, self._free_lanes = self._lane_sets, [], []
        for lanes in sets:
            for addr, q in lanes:
                self._free_staging_impl(addr, q)

    def staged(self, to_device: bool, tgt: int, host: int, size: int) -> None:
        """Copy through the plugin's pinned staging buffers: several workers, each with
        two buffers, take chunks as they free up (a slow worker delays no one) and
        overlap the host memcpy of one chunk with the DMA of another."""
        chunk = self.plugin.staging_chunk
        nchunks = -(-size // chunk)
        workers = max(1, min(self.plugin.staging_lanes // 2, nchunks,
                             (os.cpu_count() or 2) - 1))
        todo = iter(range(nchunks))            # shared: next() is atomic under the GIL
        all_lanes = self._take_lanes(2 * workers)

        def work(w: int) -> None:
            lanes = all_lanes[2 * w:2 * w + 2]
            pending: list[Optional[tuple[int, int]]] = [None, None]
            for j, c in enumerate(todo):
                buf, q = lanes[j % 2]
                off = c * chunk
                n = min(chunk, size - off)
                if to_device:
                    self._sync_impl(q)                 # the lane's last DMA is done
                    memmove(buf, host + off, n)
                    self._submit_impl(tgt + off, buf, n, q, buf)
                else:
                    self._retrieve_impl(buf, tgt + off, n, q, buf)
                    k = (j + 1) % 2
                    if pending[k] is not None:         # drain the other lane meanwhile
                        self._sync_impl(lanes[k][1])
                        memmove(host + pending[k][0], lanes[k][0], pending[k][1])
                        pending[k] = None
                    pending[j % 2] = (off, n)
            for k in (0, 1):
                self._sync_impl(lanes[k][1])
                if pending[k] is not None:
                    memmove(host + pending[k][0], lanes[k][0], pending[k][1])

        try:
            if workers == 1:
                work(0)
                return
            with self._lock:
                if self._stage_pool is None:
                    self._stage_pool = concurrent.futures.ThreadPoolExecutor(
                        self.plugin.staging_lanes // 2, thread_name_prefix="offload-staging")
                pool = self._stage_pool
            futures = [pool.submit(work, w) for w in range(workers)]
            concurrent.futures.wait(futures)       # all done before the lanes go back
            for f in futures:
                f.result()
        finally:
            self._give_lanes(all_lanes)

    # ---- allocations ------------------------------------------------------
    def alloc(self, size: int, kind: AllocKind) -> int:
        if size <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot allocate {size} bytes: size must be positive")
        with self._lock:
            cached = self._pool.get(size) if kind is AllocKind.DEVICE else None
            if cached:
                addr = cached.pop()
                self._pool_bytes -= size
                self._allocs[addr] = (size, kind)
                return addr
        try:
            addr = self._alloc_impl(size, kind)
        except OffloadError as exc:
            if exc.code is not ErrorCode.OUT_OF_RESOURCES or not self.trim_pool():
                raise
            addr = self._alloc_impl(size, kind)     # the pool gave memory back: again
        with self._lock:
            self._allocs[addr] = (size, kind)
        return addr

    def free(self, addr: int, kind: Optional[AllocKind] = None) -> int:
        with self._lock:
            rec = self._allocs.get(addr)
            if rec is None or (kind is not None and rec[1] is not kind):
                what = f" with kind {kind.value}" if kind else ""
                raise OffloadError(ErrorCode.NOT_FOUND,
                                   f"0x{addr:x} is not memory allocated{what} on device "
                                   f"{self.id} of plugin {self.plugin.name}")
            del self._allocs[addr]
            size, kind = rec
            if kind is AllocKind.DEVICE and \
                    self._pool_bytes + size <= self.plugin.device_pool_bytes:
                self._pool.setdefault(size, []).append(addr)     # kept for the next alloc
                self._pool_bytes += size
                return size
        self._free_impl(addr, size, kind)
        return size

    def trim_pool(self) -> int:
        """Give the pool's cached device memory back to the driver; bytes freed."""
        with self._lock:
            pool, self._pool, freed, self._pool_bytes = self._pool, {}, self._pool_bytes, 0
        for size, addrs in pool.items():
            for addr in addrs:
                self._free_impl(addr, size, AllocKind.DEVICE)
        return freed

    def allocation(self, addr: int) -> Optional[tuple[int, AllocKind]]:
        return self._allocs.get(addr)

    # ---- images -----------------------------------------------------------
    def load(self, binary: Binary) -> Any:
        prog = self._loaded.get(binary.digest)
        if prog is None:
            prog = self._load_impl(binary)
            with self._lock:
                prog = self._loaded.setdefault(binary.digest, prog)
        return prog

    def drain(self) -> None:
        """Wait for every queue this device made."""
        for q in list(self._all_queues):
            self._sync_impl(q)

    def free_all(self, kinds: tuple[AllocKind, ...]) -> None:
        """Free what is still allocated with one of `kinds` (teardown)."""
        with self._lock:
            gone = {a: r for a, r in self._allocs.items() if r[1] in kinds}
            for a in gone:
                del self._allocs[a]
        for addr, (size, kind) in gone.items():
            self._free_impl(addr, size, kind)


class GenericPlugin:
    """The plugin table (DESIGN.md §3); vendors override the hooks."""

    name = "generic"
    #: plugins are ordered by priority, lowest first: GPUs before the host
    priority = 50
    device_class = GenericDevice
    #: copies on a queue may still run after the call returns (GPU plugins)
    asynchronous = False
    #: freed device memory kept for reuse by an allocation of the same size, at most
    #: this many bytes (0: none); given back when an allocation runs out of memory
    device_pool_bytes = 0
    #: unpinned pieces of at least this many bytes go through staging (None: never)
    staging_threshold: Optional[int] = None
    staging_chunk = 8 << 20
    staging_lanes = 8

    def __init__(self, config: Config):
        self.config = config
        self.pinned = PinnedMap()
        self.reason = ""               # why this plugin has no devices
        self._devices: list[Optional[GenericDevice]] = []
        self._lock = threading.Lock()
        self._count: Optional[int] = None

    # ---- vendor hooks -----------------------------------------------------
    def _init_impl(self) -> int:
        """Load the driver; return the number of devices (raise to say why none)."""
        return 0

    def _deinit_impl(self) -> None: ...

    def check_binary(self, binary: Binary, dev: Optional[GenericDevice] = None) -> None:
        """Raise INVALID_BINARY naming the mismatch unless `binary` runs on dev
        (on some device of this plugin when dev is None)."""
        raise OffloadError(ErrorCode.INVALID_BINARY, f"plugin {self.name} loads no images")

    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"plugin {self.name} cannot pin memory")

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None: ...

    def _is_pinned_impl(self, host: int, size: int) -> Optional[tuple[int, int, int]]:
        return None

    # ---- PinDriver, for PinnedMap -----------------------------------------
    def pin(self, device: int, host: int, size: int, first: bool, read_only: bool) -> int:
        return self._lock_impl(device, host, size, first, read_only)

    def unpin(self, device: int, host: int, size: int, last: bool) -> None:
        self._unlock_impl(device, host, size, last)

    def query(self, host: int, size: int) -> Optional[tuple[int, int, int]]:
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

    def init_device(self, d: int) -> GenericDevice:
        dev = self._devices[d] if d < len(self._devices) else None
        if dev is not None:
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

    def initialized_devices(self) -> list[GenericDevice]:
        return [d for d in self._devices if d is not None]

    def is_valid_binary(self, binary: Binary, d: Optional[int] = None) -> bool:
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
        self._transfer(True, d, tgt, host, size, queue)

    def data_retrieve(self, d: int, host: int, tgt: int, size: int, queue: Any = None) -> None:
        """Device -> host, the same way; without a queue, returns when complete."""
        self._transfer(False, d, tgt, host, size, queue)

    def _transfer(self, to_device: bool, d: int, tgt: int, host: int, size: int,
                  queue: Any) -> None:
        dev = self.device(d)
        stats = dev.stats
        own = queue is None and self.asynchronous
        q = dev.get_queue() if own else queue
        stage = self.staging_threshold
        try:
            for off, n, via in self.pinned.translate(host, size, d):
                if via is None and stage is not None and n >= stage:
                    if q is not None:          # staging runs on queues of its own: what
                        dev._sync_impl(q)      # was enqueued before (a kernel) goes first
                    dev.staged(to_device, tgt + off, host + off, n)
                elif to_device:
                    dev._submit_impl(tgt + off, host + off, n, q, via)
                else:
                    dev._retrieve_impl(host + off, tgt + off, n, q, via)
                key = ("to " if to_device else "from ") + ("unpinned" if via is None else "pinned")
                stats[key] += n
            if own:
                dev._sync_impl(q)
        finally:
            if own:
                dev.release_queue(q)

    def data_exchange(self, src_d: int, src: int, dst_plugin: "GenericPlugin", dst_d: int,
                      dst: int, size: int, queue: Any = None) -> bool:
        return self.device(src_d)._exchange_impl(src, dst_plugin.device(dst_d), dst, size,
                                                 queue)

    def data_lock(self, d: int, host: int, size: int, owner: Any = None,
                  read_only: bool = False) -> int:
        return self.pinned.acquire(self, host, size, d, kind=Kind.USER, owner=owner,
                                   read_only=read_only)

    def data_unlock(self, d: int, host: int) -> None:
        self.pinned.release(self, host, d)

    def data_notify_mapped(self, d: int, host: int, size: int, owner: Any = None,
                           read_only: bool = False) -> Optional[int]:
        """A new mapping of [host, host+size): take a reference on a pinned entry
        containing it, or pin it per LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS.
        Returns the device-accessible address, or None when it stays unpinned."""
        mode = self.config.lock_mapped
        if size <= 0:
            return None
        try:
            return self.pinned.acquire(self, host, size, d, kind=Kind.MAPPED, owner=owner,
                                       read_only=read_only, create=mode is not LockMapped.OFF,
                                       partial_ok=True)
        except OffloadError:
            if mode is LockMapped.MANDATORY:
                raise
            return None

    def data_notify_unmapped(self, d: int, host: int) -> None:
        self.pinned.release(self, host, d, what="mapped pinned buffer")

    def launch_kernel(self, d: int, binary: Binary, name: str, args: Sequence[Any],
                      teams: Optional[int] = None, threads: Optional[int] = None,
                      queue: Any = None) -> None:
        dev = self.device(d)
        dev._launch_impl(dev.load(binary), binary, name, args, teams, threads, queue)

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
        for dev in devices:
            dev.free_all((AllocKind.HOST,))
            dev.free_staging()
            dev._deinit_impl()
        self._deinit_impl()

    def forget(self) -> None:
        """After fork(): drop every record without a driver call."""
        self.pinned = PinnedMap()
        self._devices = []
        self._count = None
