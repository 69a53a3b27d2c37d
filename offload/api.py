"""The public API: OpenMP-named functions (DESIGN.md §4) and the Pythonic layer (§5).

This is the edge: numpy arrays become (address, size, owner) here, and
OffloadErrors become C-style return values in the OpenMP-named functions.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from . import config as _config
from .config import Info, TargetOffload
from .device import Device
from .errors import ErrorCode, OffloadError
from .image import Image, Kernel
from .mapping import MapItem, MapType
from .plugin_manager import PluginManager
from .plugins.common import AllocKind, memmove
from .plugins.host import HostPlugin

omp_initial_device = -1
omp_invalid_device = -2
OFFLOAD_SUCCESS = 0
OFFLOAD_FAIL = -1
INT_MAX = 2**31 - 1
_I_KERNEL, _I_DUMP = int(Info.PLUGIN_KERNEL), int(Info.DUMP_TABLE)   # plain ints: fast tests

# ---- the runtime ------------------------------------------------------------
_state_lock = threading.Lock()
_manager: Optional[PluginManager] = None
_shut_manager: Optional[PluginManager] = None     # set after shutdown(): quiet no-ops
_default_device: Optional[int] = None
_initial: Optional[HostPlugin] = None


def _rt() -> PluginManager:
    m = _manager
    if m is not None:
        return m
    return _start()


def _start() -> PluginManager:
    global _manager, _shut_manager, _default_device
    with _state_lock:
        if _manager is None:
            cfg = _config.read()
            _manager = PluginManager(cfg)
            _shut_manager = None
            _default_device = cfg.default_device
        return _manager


def shutdown() -> None:
    """Tear the runtime down: drain queues, free device memory, unpin, release contexts.

    Unlock and free after this are quiet no-ops; any other call starts a new runtime.
    """
    global _manager, _shut_manager
    taskwait()
    with _state_lock:
        m, _manager = _manager, None
        if m is not None:
            _shut_manager = m
    if m is not None:
        m.shutdown()


def _after_fork_in_child() -> None:
    """The child starts empty: pins and device contexts are not inherited."""
    global _manager, _shut_manager, _pool, _handles, _state_lock, _initial
    _state_lock = threading.Lock()
    if _manager is not None:
        _manager.forget()
    _manager = None
    _shut_manager = None
    _initial = None
    _pool = None
    _handles = []


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _torn_down() -> bool:
    return _manager is None and _shut_manager is not None


# ---- addresses ---------------------------------------------------------------
def _ptr(x: Any) -> int:
    """An int address from an int, None or any buffer-protocol object."""
    if x is None:
        return 0
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    try:
        return np.asarray(memoryview(x)).__array_interface__["data"][0]
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"expected an address (int) or an array, got "
                           f"{type(x).__name__}") from None


def _array(a: Any, what: str) -> np.ndarray:
    if isinstance(a, np.ndarray):
        arr = a
    else:
        try:
            arr = np.asarray(memoryview(a))
        except TypeError:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{what}: expected a numpy array or buffer, got "
                               f"{type(a).__name__}") from None
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: cannot map a non-contiguous array (shape {arr.shape}, "
                           f"strides {arr.strides}); pass a contiguous copy or section")
    return arr


def _span(arr: np.ndarray) -> tuple[int, int]:
    return arr.__array_interface__["data"][0], arr.nbytes


# ---- devices -------------------------------------------------------------------
def _device(n: Optional[int]) -> Optional[Device]:
    """The Device for a device number; None for the initial device (the host)."""
    m = _rt()
    if n is None:
        n = _default_device if _default_device is not None else 0
        if n >= m.num_devices():
            return None
    if isinstance(n, np.integer):
        n = int(n)
    if n == omp_initial_device or n == m.num_devices():
        return None
    if n == omp_invalid_device or not isinstance(n, int) or n < 0 or n > m.num_devices():
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"device number '{n}' out of range, only {m.num_devices()} "
                           f"devices available")
    return m.get_device(n)


def _initial_plugin() -> HostPlugin:
    """A private host plugin that runs host binaries for the initial device."""
    global _initial
    if _initial is None:
        with _state_lock:
            if _initial is None:
                cfg = _config.read()
                p = HostPlugin(_config.Config(cache_dir=cfg.cache_dir, host_num_devices=1))
                p.init_device(0)
                _initial = p
    return _initial


def _fail(exc: OffloadError, value: Any) -> Any:
    print(f"omptarget error: {exc.message}", file=sys.stderr)
    return value


# ---- OpenMP-named API (DESIGN.md §4) -------------------------------------------
def omp_get_num_devices() -> int:
    return _rt().num_devices()


def omp_get_initial_device() -> int:
    return _rt().num_devices()


def omp_get_default_device() -> int:
    m = _rt()
    n = _default_device or 0
    return n if n < m.num_devices() else m.num_devices()


def omp_set_default_device(n: int) -> None:
    global _default_device
    _rt()
    _default_device = int(n)


def omp_is_initial_device() -> int:
    """1: Python code runs on the host, which is the initial device."""
    return 1


def _alloc(size: int, device_num: int, kind: AllocKind) -> int:
    dev = _device(device_num)
    if size <= 0:
        return 0
    try:
        if dev is None:
            return _initial_plugin().data_alloc(0, size, kind)
        return dev.alloc(size, kind)
    except OffloadError as exc:
        return _fail(exc, 0)


def _free(ptr: Any, device_num: int, kind: AllocKind) -> None:
    if _torn_down():
        return
    dev = _device(device_num)
    p = _ptr(ptr)
    if p == 0:
        return
    try:
        if dev is None:
            _initial_plugin().data_delete(0, p, kind)
        else:
            dev.free(p, kind)
    except OffloadError as exc:
        _fail(exc, None)


def omp_target_alloc(size: int, device_num: int) -> int:
    return _alloc(size, device_num, AllocKind.DEVICE)


def omp_target_free(ptr: Any, device_num: int) -> None:
    _free(ptr, device_num, AllocKind.DEVICE)


def llvm_omp_target_alloc_device(size: int, device_num: int) -> int:
    return _alloc(size, device_num, AllocKind.DEVICE)


def llvm_omp_target_alloc_host(size: int, device_num: int) -> int:
    return _alloc(size, device_num, AllocKind.HOST)


def llvm_omp_target_alloc_shared(size: int, device_num: int) -> int:
    return _alloc(size, device_num, AllocKind.SHARED)


def llvm_omp_target_free_device(ptr: Any, device_num: int) -> None:
    _free(ptr, device_num, AllocKind.DEVICE)


def llvm_omp_target_free_host(ptr: Any, device_num: int) -> None:
    _free(ptr, device_num, AllocKind.HOST)


def llvm_omp_target_free_shared(ptr: Any, device_num: int) -> None:
    _free(ptr, device_num, AllocKind.SHARED)


def _copy(dst: int, src: int, n: int, ddev: Optional[Device], sdev: Optional[Device]) -> None:
    if ddev is None and sdev is None:
        memmove(dst, src, n)
    elif sdev is None:
        ddev.submit(dst, src, n)
    elif ddev is None:
        sdev.retrieve(dst, src, n)
    elif not sdev.exchange(src, ddev, dst, n):
        buf = np.empty(n, dtype=np.uint8)
        sdev.retrieve(_span(buf)[0], src, n)
        ddev.submit(dst, _span(buf)[0], n)


def omp_target_memcpy(dst: Any, src: Any, length: int, dst_offset: int, src_offset: int,
                      dst_device_num: int, src_device_num: int) -> int:
    ddev, sdev = _device(dst_device_num), _device(src_device_num)
    try:
        if length < 0 or dst_offset < 0 or src_offset < 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"omp_target_memcpy: negative length or offset "
                               f"({length}, {dst_offset}, {src_offset})")
        if length == 0:
            return OFFLOAD_SUCCESS
        d, s = _ptr(dst), _ptr(src)
        if d == 0 or s == 0:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"omp_target_memcpy: NULL {'dst' if d == 0 else 'src'} pointer")
        _copy(d + dst_offset, s + src_offset, length, ddev, sdev)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def omp_target_memcpy_rect(dst: Any, src: Any, element_size: int, num_dims: int,
                           volume: Sequence[int], dst_offsets: Sequence[int],
                           src_offsets: Sequence[int], dst_dimensions: Sequence[int],
                           src_dimensions: Sequence[int], dst_device_num: int,
                           src_device_num: int) -> int:
    d, s = _ptr(dst), _ptr(src)
    if d == 0 and s == 0:
        return INT_MAX
    ddev, sdev = _device(dst_device_num), _device(src_device_num)
    try:
        if d == 0 or s == 0 or element_size <= 0 or num_dims <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"omp_target_memcpy_rect: bad arguments (dst=0x{d:x}, src=0x{s:x}, "
                               f"element_size={element_size}, num_dims={num_dims})")
        for name, seq in (("volume", volume), ("dst_offsets", dst_offsets),
                          ("src_offsets", src_offsets), ("dst_dimensions", dst_dimensions),
                          ("src_dimensions", src_dimensions)):
            if len(seq) < num_dims:
                raise OffloadError(ErrorCode.INVALID_VALUE,
                                   f"omp_target_memcpy_rect: {name} has {len(seq)} entries, "
                                   f"num_dims is {num_dims}")
        _rect(d, s, element_size, num_dims, list(volume), list(dst_offsets),
              list(src_offsets), list(dst_dimensions), list(src_dimensions), ddev, sdev)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def _rect(d, s, es, nd, vol, doff, soff, ddim, sdim, ddev, sdev) -> None:
    if nd == 1:
        _copy(d + es * doff[0], s + es * soff[0], es * vol[0], ddev, sdev)
        return
    dslice = es
    sslice = es
    for x in ddim[1:nd]:
        dslice *= x
    for x in sdim[1:nd]:
        sslice *= x
    for i in range(vol[0]):
        _rect(d + dslice * (doff[0] + i), s + sslice * (soff[0] + i), es, nd - 1, vol[1:],
              doff[1:], soff[1:], ddim[1:], sdim[1:], ddev, sdev)


def omp_target_associate_ptr(host_ptr: Any, device_ptr: Any, size: int, device_offset: int,
                             device_num: int) -> int:
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "omp_target_associate_ptr: the initial device needs no association")
        h, t = _ptr(host_ptr), _ptr(device_ptr)
        if h == 0 or t == 0 or size <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"omp_target_associate_ptr: bad arguments (host=0x{h:x}, "
                               f"device=0x{t:x}, size={size})")
        dev.table.associate(h, t + device_offset, size)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def omp_target_disassociate_ptr(host_ptr: Any, device_num: int) -> int:
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "omp_target_disassociate_ptr: not for the initial device")
        dev.table.disassociate(_ptr(host_ptr))
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def omp_get_mapped_ptr(ptr: Any, device_num: int) -> int:
    dev = _device(device_num)
    p = _ptr(ptr)
    if p == 0:
        return 0
    if dev is None:
        return p
    e = dev.table.lookup(p, 0)
    return 0 if e is None else e.tgt_begin + (p - e.hst_begin)


def omp_target_is_present(ptr: Any, device_num: int) -> int:
    dev = _device(device_num)
    p = _ptr(ptr)
    if dev is None:
        return 1
    if p == 0:
        return 0
    return int(dev.table.lookup(p, 0) is not None)


def omp_target_is_accessible(ptr: Any, size: int, device_num: int) -> int:
    dev = _device(device_num)
    if dev is None:
        return 1
    p = _ptr(ptr)
    if p == 0 or size < 0:
        return 0
    return int(dev.is_accessible(p, size))


def llvm_omp_target_lock_mem(ptr: Any, size: int, device_num: int) -> int:
    """Pin [ptr, ptr+size) for device_num; the device-accessible address, or 0."""
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot lock memory for the initial device ({device_num})")
        return dev.lock(_ptr(ptr), size, owner=ptr if not isinstance(ptr, int) else None)
    except OffloadError as exc:
        return _fail(exc, 0)


def llvm_omp_target_unlock_mem(ptr: Any, device_num: int) -> None:
    """Drop one lock of the buffer containing ptr; a no-op after teardown."""
    if _torn_down():
        return
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot unlock memory for the initial device ({device_num})")
        dev.unlock(_ptr(ptr))
    except OffloadError as exc:
        _fail(exc, None)


# ---- the Pythonic layer (DESIGN.md §5) -----------------------------------------
class MapClause:
    """A map clause over a numpy array (or any contiguous buffer)."""

    __slots__ = ("array", "type", "name")

    def __init__(self, array: Any, type: MapType, name: Optional[str] = None):
        self.array = array
        self.type = type
        self.name = name

    def item(self) -> MapItem:
        arr = _array(self.array, "map")
        p, n = _span(arr)
        return MapItem(p, n, self.type, arr, self.name, not arr.flags.writeable)

    def __repr__(self) -> str:
        return f"MapClause({self.type!r}, {self.name or type(self.array).__name__})"


def _clause(base: MapType, a: Any, always: bool, present: bool, close: bool, hold: bool,
            name: Optional[str]) -> MapClause:
    t = base
    if always:
        t |= MapType.ALWAYS
    if present:
        t |= MapType.PRESENT
    if close:
        t |= MapType.CLOSE
    if hold:
        t |= MapType.OMPX_HOLD
    return MapClause(a, t, name)


def to(a, *, always=False, present=False, close=False, hold=False, name=None) -> MapClause:
    return _clause(MapType.TO, a, always, present, close, hold, name)


def from_(a, *, always=False, present=False, close=False, hold=False, name=None) -> MapClause:
    return _clause(MapType.FROM, a, always, present, close, hold, name)


def tofrom(a, *, always=False, present=False, close=False, hold=False, name=None) -> MapClause:
    return _clause(MapType.TO | MapType.FROM, a, always, present, close, hold, name)


def alloc(a, *, always=False, present=False, close=False, hold=False, name=None) -> MapClause:
    return _clause(MapType.NONE, a, always, present, close, hold, name)


def release(a, *, always=False, present=False, close=False, hold=False, name=None) -> MapClause:
    return _clause(MapType.NONE, a, always, present, close, hold, name)


def delete(a, *, always=False, present=False, close=False, hold=False, name=None) -> MapClause:
    return _clause(MapType.DELETE, a, always, present, close, hold, name)


def _items(maps: Iterable[Any], default: MapType) -> list[MapItem]:
    out = []
    for m in maps:
        out.append(m.item() if isinstance(m, MapClause) else MapClause(m, default).item())
    return out


# ---- nowait handles ---------------------------------------------------------------
_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_handles: list["Handle"] = []
_handles_lock = threading.Lock()


class Handle:
    """A `nowait` construct in flight; `wait()` returns its result or raises."""

    def __init__(self, future: concurrent.futures.Future):
        self._future = future

    def wait(self) -> Any:
        try:
            return self._future.result()
        finally:
            with _handles_lock:
                if self in _handles:
                    _handles.remove(self)

    def done(self) -> bool:
        return self._future.done()


def _spawn(fn, *args) -> Handle:
    global _pool
    if _pool is None:
        with _handles_lock:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=8, thread_name_prefix="offload-nowait")
    h = Handle(_pool.submit(fn, *args))
    with _handles_lock:
        _handles.append(h)
    return h


def taskwait() -> None:
    """Wait for every outstanding `nowait` handle; raise the first error seen."""
    first = None
    while True:
        with _handles_lock:
            pending = list(_handles)
        if not pending:
            break
        for h in pending:
            try:
                h.wait()
            except BaseException as exc:   # noqa: BLE001 - re-raised below
                first = first or exc
    if first is not None:
        raise first


# ---- target regions -----------------------------------------------------------------
def target(kernel: Kernel, *args: Any, map: Sequence[Any] = (), device: Optional[int] = None,
           teams: Optional[int] = None, threads: Optional[int] = None,
           nowait: bool = False) -> Optional[Handle]:
    """Run `kernel` on a device: map, launch, unmap.

    Array arguments become device addresses through the mapping that holds
    them; arrays no clause or mapping covers are mapped tofrom for the region.
    With nowait=True, returns a Handle; read the arrays only after `wait()`.
    """
    if not isinstance(kernel, Kernel):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"target: expected a kernel (image.name), got {type(kernel).__name__}")
    dev = _device(device)
    if nowait:
        return _spawn(_target, kernel, args, map, dev, teams, threads)
    _target(kernel, args, map, dev, teams, threads)
    return None


def _target(kernel: Kernel, args: Sequence[Any], maps: Sequence[Any], dev: Optional[Device],
            teams: Optional[int], threads: Optional[int]) -> None:
    if dev is not None and dev.binary_for(kernel) is None:
        if _rt().config.target_offload is TargetOffload.MANDATORY:
            dev.check_binary(kernel)
        dev = None
    if dev is None:
        _run_on_host(kernel, args, teams, threads)
        return
    items = _items(maps, MapType.TO | MapType.FROM)
    table = dev.table
    spans: list[Optional[tuple[int, int]]] = []
    for a in args:
        if not isinstance(a, np.ndarray):
            spans.append(None)
            continue
        it = next((it for it in items if it.owner is a), None)
        p, n = (it.host, it.size) if it is not None else _span(a)
        spans.append((p, n))
        if it is None and not any(it.host < p + max(n, 1) and p < it.host + max(it.size, 1)
                                  for it in items) and table.overlapping(p, n) is None:
            items.append(MapClause(a, MapType.TO | MapType.FROM | MapType.IMPLICIT).item())
    queue = dev.get_queue()
    try:
        table.target_data_begin(items, queue)
        try:
            kargs = [_kernel_arg(table, items, a, sp) for a, sp in zip(args, spans)]
            if table.info & _I_KERNEL:
                print(f"omptarget device {dev.number} info: Launching kernel {kernel.name} "
                      f"with {teams or 1} blocks and {threads or 'default'} threads, "
                      f"{len(kargs)} argument(s)", file=sys.stderr)
            dev.launch(kernel, kargs, teams, threads, queue)
        except BaseException:
            table.target_data_end(items, queue, copy_back=False)
            raise
        table.target_data_end(items, queue)
        dev.synchronize(queue)
        if table.info & _I_DUMP:
            print(table.dump(), file=sys.stderr)
    finally:
        dev.release_queue(queue)


def _kernel_arg(table, items: Sequence[MapItem], a: Any,
                span: Optional[tuple[int, int]]) -> Any:
    """Arrays: the device address of a[0], from the clause (else mapping) that holds it."""
    if span is not None:
        p, n = span
        e = None
        for it in items:
            if it.size and it.host < p + max(n, 1) and p < it.host + it.size:
                e = table.lookup(it.host, it.size)
                break
        if e is None:
            e = table.overlapping(p, n)
        if e is None:
            return 0
        return e.tgt_begin + (p - e.hst_begin)
    if isinstance(a, np.generic):
        return a.item()
    return a


def _run_on_host(kernel: Kernel, args: Sequence[Any], teams, threads) -> None:
    plugin = _initial_plugin()
    binary = next((b for b in kernel.image.binaries if plugin.is_valid_binary(b)), None)
    if binary is None:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"kernel '{kernel.name}' has no host binary to run on the initial "
                           f"device; combine a compile_c image into it with Image.combine")
    conv = [_span(a)[0] if isinstance(a, np.ndarray)
            else a.item() if isinstance(a, np.generic) else a for a in args]
    plugin.launch_kernel(0, binary, kernel.name, conv, teams, threads)


class target_data:
    """`with target_data(tofrom(a), to(b)):` maps on entry, unmaps on exit.

    Left by an exception, the region still unmaps but copies nothing back.
    """

    def __init__(self, *maps: Any, device: Optional[int] = None):
        self._maps = maps
        self._device = device
        self._items: list[MapItem] = []
        self._dev: Optional[Device] = None

    def __enter__(self) -> "target_data":
        self._dev = _device(self._device)
        if self._dev is not None:
            items = _items(self._maps, MapType.TO | MapType.FROM)
            self._dev.table.target_data_begin(items)
            self._items = items
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._dev is not None and self._items:
            items, self._items = self._items, []
            self._dev.table.target_data_end(items, copy_back=exc_type is None)


def target_enter_data(*maps: Any, device: Optional[int] = None,
                      nowait: bool = False) -> Optional[Handle]:
    """Map clauses until a matching target_exit_data (all or nothing)."""
    dev = _device(device)
    items = _items(maps, MapType.TO)
    if dev is None:
        return None
    if nowait:
        return _spawn(dev.table.target_data_begin, items)
    dev.table.target_data_begin(items)
    return None


def target_exit_data(*maps: Any, device: Optional[int] = None,
                     nowait: bool = False) -> Optional[Handle]:
    """Unmap clauses: from_ copies back on the last reference, delete forces it."""
    dev = _device(device)
    items = _items(maps, MapType.FROM)
    for it in items:
        it.type &= ~MapType.TO
    if dev is None:
        return None
    if nowait:
        return _spawn(dev.table.target_data_end, items)
    dev.table.target_data_end(items)
    return None


def target_update(to: Sequence[Any] = (), from_: Sequence[Any] = (),
                  device: Optional[int] = None, nowait: bool = False) -> Optional[Handle]:
    """Copy present data: `to` host->device, `from_` device->host."""
    dev = _device(device)
    items = []
    for m in to:
        it = m.item() if isinstance(m, MapClause) else MapClause(m, MapType.TO).item()
        it.type = (it.type & MapType.PRESENT) | MapType.TO
        items.append(it)
    for m in from_:
        it = m.item() if isinstance(m, MapClause) else MapClause(m, MapType.FROM).item()
        it.type = (it.type & MapType.PRESENT) | MapType.FROM
        items.append(it)
    if dev is None:
        return None
    if nowait:
        return _spawn(dev.table.target_data_update, items)
    dev.table.target_data_update(items)
    return None


# ---- pinning ----------------------------------------------------------------------
class Pinned:
    """One lock reference on an array's memory; `unlock()` gives it back once."""

    def __init__(self, array: Any, dev: Device, host: int, size: int, device_address: int):
        self.array = array
        self.device = dev.number
        self.host = host
        self.size = size
        self.device_address = device_address
        self._dev = dev
        self._runtime = _rt()              # the runtime that holds the pin
        self._lock = threading.Lock()
        self._locked = True

    @property
    def locked(self) -> bool:
        return self._locked

    def unlock(self) -> None:
        with self._lock:
            if not self._locked:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"already unlocked: 0x{self.host:x} ({self.size} bytes) "
                                   f"on device {self.device}")
            self._locked = False
        if self._runtime.is_shut:          # torn down since: the pin went with it
            return
        self._dev.unlock(self.host)

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(self, *exc) -> None:
        if self._locked:
            self.unlock()

    def __repr__(self) -> str:
        state = "locked" if self._locked else "unlocked"
        return (f"<Pinned 0x{self.host:x} ({self.size} bytes) -> 0x{self.device_address:x} on "
                f"device {self.device}, {state}>")


def lock(a: Any, device: Optional[int] = None) -> Pinned:
    """Pin an array's memory for a device (reference counted); returns a Pinned."""
    dev = _device(device)
    if dev is None:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           "cannot lock memory for the initial device; pass a device number")
    arr = _array(a, "lock")
    p, n = _span(arr)
    addr = dev.lock(p, n, owner=arr, read_only=not arr.flags.writeable)
    return Pinned(arr, dev, p, n, addr)


def locked(a: Any, device: Optional[int] = None) -> Pinned:
    """`with locked(a):` pins for the block and unpins on exit."""
    return lock(a, device)


# ---- kernels and introspection --------------------------------------------------------
def compile_cuda(source: str, *, arch: Optional[str] = None, ptx: bool = False) -> Image:
    """Compile CUDA C++ with NVRTC into a cubin (or PTX) image (needs libnvrtc);
    `arch` defaults to the first CUDA device's, else sm_90."""
    from .plugins.cuda import CUDAPlugin
    from .plugins.cuda import compile_cuda as _compile
    if arch is None:
        arch = next((a for p in _rt().plugins if isinstance(p, CUDAPlugin)
                     for a in [p.architecture()] if a), "sm_90")
    return _compile(source, arch=arch, ptx=ptx)


@dataclass
class DeviceRecord:
    number: int
    plugin: str
    name: str
    properties: dict = field(default_factory=dict)


def devices() -> list[DeviceRecord]:
    """One record per device: number, plugin, name, properties."""
    m = _rt()
    out = []
    for n in range(m.num_devices()):
        dev = m.get_device(n)
        props = dev.info()
        out.append(DeviceRecord(n, dev.plugin.name, str(props.get("name", "?")), props))
    return out


def runtime() -> PluginManager:
    """The live PluginManager (started on first use)."""
    return _rt()
