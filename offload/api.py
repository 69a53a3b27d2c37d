"""The Pythonic layer (docs/design.md §5): data constructs (target_data, enter/exit,
target_update), taskwait and shutdown; with them the map clauses (clauses.py),
prelocking (prelock.py) and devices / compile_cuda (inventory.py). Target regions are
in target.py, the OpenMP-named functions in omp.py."""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

from ._lazy import numpy as np
from .arrays import as_array, extent, span
from .clauses import (
    MapClause,
    MapItem,
    MapType,
    alloc,
    delete,
    from_,
    map_items,
    release,
    to,
    tofrom,
)
from .device import Device
from .errors import ErrorCode, OffloadError
from .inventory import DeviceRecord, compile_cuda, devices
from .nowait import Handle, check_depend, queue_after, stream_queue, wait_depend
from .prelock import Pinned, lock, locked
from .runtime import Runtime, operation, resource_operation
from .runtime import current as _current
from .runtime import shutdown as _shutdown

__all__ = [
    "DeviceRecord", "Handle", "MapClause", "Pinned", "alloc", "compile_cuda", "delete",
    "devices", "from_", "lock", "locked", "release", "shutdown", "target_data",
    "target_enter_data", "target_exit_data", "target_update", "taskwait", "to", "tofrom",
]


# ---- data constructs ----------------------------------------------------------------
class target_data:
    """`with target_data(tofrom(a), to(b)):` maps on entry, unmaps on exit.

    Entry is all or nothing. Left by an exception, the region still unmaps but copies
    nothing back. On the initial device it maps nothing.

    Args:
        *maps: map clauses, or bare arrays (mapped `tofrom`).
        device: device number; None for the default device.
        use_device_ptr: arrays whose device address `d[a]` gives inside
            `with ... as d:` (the address of a's first byte in its mapping, LLVM's lookup;
            a's host address when that byte is not mapped, as OpenMP 5.1 says).
        use_device_addr: the same, for `use_device_addr` (OpenMP's two clauses give the
            same address for an array).

    Raises:
        OffloadError: as `target_enter_data`, on entry.

    Example:
        >>> with offload.target_data(offload.tofrom(a)):
        ...     offload.target(k.add_one, a, 0, a.size)
    """

    def __init__(self, *maps: Any, device: int | None = None,
                 use_device_ptr: Sequence[Any] = (), use_device_addr: Sequence[Any] = ()):
        self._maps = maps
        self._device = device
        self._use = [*_array_list(use_device_ptr, "use_device_ptr"),
                     *_array_list(use_device_addr, "use_device_addr")]
        # thread -> its entries of this object not yet exited, innermost last: an object
        # entered again (`with td: with td:`, or from another thread) acts as a nested
        # construct, each exit ending its own entry
        self._open: dict[int, list[_DataEntry]] = {}

    @resource_operation(lambda td, *_: td.__exit__(KeyboardInterrupt, None, None))
    def __enter__(self) -> target_data:
        rt = _current()
        dev = rt.construct_device(self._device)
        items: list[MapItem] = []
        if dev is not None:
            items = map_items(self._maps, MapType.TO | MapType.FROM, "target_data")
            dev.table.target_data_begin(items)
        entry = _DataEntry(rt, dev, items)
        self._open.setdefault(threading.get_ident(), []).append(entry)
        if dev is not None:
            dev.table.dump_if_asked()
        entry.addresses = [(a, _device_address(dev, a)) for a in self._use]
        return self

    def __getitem__(self, a: Any) -> int:
        """The device address of `a`, listed in use_device_ptr / use_device_addr."""
        stack = self._open.get(threading.get_ident())
        if not stack:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, "target_data: d[a] is the device "
                               "address inside `with target_data(...) as d:` only")
        for x, addr in stack[-1].addresses:
            if x is a:
                return addr
        raise KeyError(f"{type(a).__name__} is not listed in this target_data's "
                       f"use_device_ptr / use_device_addr")

    @operation
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        me = threading.get_ident()
        stack = self._open.get(me)
        if not stack:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               "target_data: exited more often than entered")
        entry = stack.pop()
        if not stack:
            del self._open[me]
        if entry.pid != os.getpid() or entry.rt.is_shut:
            # entered by the parent of this forked child (which starts empty), or shut down
            # meanwhile: its mappings are not this runtime's
            return
        if entry.dev is not None and entry.items:
            for it in entry.items:      # clang drops `present` from the end of a data region
                it.type &= ~MapType.PRESENT
            entry.dev.table.target_data_end(entry.items, copy_back=exc_type is None)
            entry.dev.table.dump_if_asked()


class _DataEntry:
    """One entry of a target_data object: its runtime, device, mapped items and the
    use_device_ptr addresses it gave."""

    __slots__ = ("rt", "dev", "items", "addresses", "pid")

    def __init__(self, rt: Runtime, dev: Device | None, items: list[MapItem]):
        self.rt, self.dev, self.items = rt, dev, items
        self.pid = os.getpid()
        self.addresses: list[tuple[Any, int]] = []


def _device_address(dev: Device | None, a: Any) -> int:
    p, _ = span(as_array(a, "use_device_ptr"))
    if dev is None:
        return p
    e = dev.table.lookup(p, 1)
    return p if e is None else e.tgt_begin + (p - e.hst_begin)


def _array_list(seq: Any, what: str) -> list[Any]:
    if not isinstance(seq, (list, tuple)):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"target_data: {what}: expected a list of arrays, got "
                           f"{type(seq).__name__}; write {what}=[a]")
    for a in seq:
        as_array(a, f"target_data: {what}")
    return list(seq)


_WITHOUT_TO: dict[MapType, MapType] = {}     # a map type less TO, made once per type


def _construct(fn: Any, items: list[MapItem], dev: Device | None,
               nowait: bool, depend: Sequence[Handle] = ()) -> Handle | None:
    deps = check_depend(depend) if depend else ()
    if dev is None:
        if deps and not nowait:
            wait_depend(deps)
        return _current().nowait.spawn(lambda: None, depend=deps) if nowait and deps else None
    table = dev.table
    if not nowait:
        if deps:
            wait_depend(deps)
        fn(items)
        if table.info:
            table.dump_if_asked()
        return None

    def run(items: list[MapItem]) -> None:
        fn(items)
        table.dump_if_asked()

    return _current().nowait.spawn(run, items, depend=deps)


def _single_range_clause(maps: Sequence[Any], dev: Device | None, nowait: bool,
           depend: Sequence[Handle]) -> tuple[int, int, int, np.ndarray, bool] | None:
    """A data construct's one clause as MappingTable.begin_single_range/end_single_range
    take it, when it is a single range (MapClause.single_range), synchronous and the table
    is not observed; else None."""
    if len(maps) != 1 or dev is None or nowait or depend or dev.table.observed:
        return None
    m = maps[0]
    return dev.table.single_range_of(m) if type(m) is MapClause else None


@operation
def target_enter_data(*maps: Any, device: int | None = None,
                      nowait: bool = False, depend: Sequence[Handle] = ()) -> Handle | None:
    """Map clauses until a matching target_exit_data (`#pragma omp target enter data`).

    Args:
        *maps: map clauses, or bare arrays (mapped `to`).
        device: device number; None for the default device (nothing on the initial device).
        nowait: return at once with a Handle.
        depend: Handles of earlier nowait work to run after (OpenMP's depend clause).

    Returns:
        None, or a Handle with `nowait=True`.

    Raises:
        OffloadError: INVALID_ARGUMENT for an explicit extension of a mapping or a
            `present` clause whose data is absent; OUT_OF_RESOURCES when the device is
            full. Every clause already applied is undone first.
    """
    dev = _current().construct_device(device)
    single = _single_range_clause(maps, dev, nowait, depend)
    if single is not None and dev is not None:   # the common case, in fewer steps
        dev.table.steps.begin_single_range(*single)
        return None
    items = map_items(maps, MapType.TO, "target_enter_data")
    return _construct(dev.table.target_data_begin if dev else None, items, dev, nowait,
                      depend)


@operation
def target_exit_data(*maps: Any, device: int | None = None,
                     nowait: bool = False, depend: Sequence[Handle] = ()) -> Handle | None:
    """Unmap clauses (`#pragma omp target exit data`): `from_` copies back on the last
    reference, `delete` drops every dynamic reference, `release` copies nothing.

    Args:
        *maps: map clauses, or bare arrays (unmapped `from`).
        device: device number; None for the default device.
        nowait: return at once with a Handle.
        depend: Handles of earlier nowait work to run after (OpenMP's depend clause).

    Returns:
        None, or a Handle with `nowait=True`.

    Raises:
        OffloadError: INVALID_ARGUMENT for a `present` clause whose data is absent.
    """
    dev = _current().construct_device(device)
    single = _single_range_clause(maps, dev, nowait, depend)
    if single is not None and dev is not None:   # the common case, in fewer steps
        dev.table.steps.end_single_range(*single[:4])
        return None
    items = map_items(maps, MapType.FROM, "target_exit_data")
    for it in items:
        t = it.type
        if t & MapType.TO:
            it.type = _WITHOUT_TO.get(t) or _WITHOUT_TO.setdefault(t, t & ~MapType.TO)
    return _construct(dev.table.target_data_end if dev else None, items, dev, nowait,
                      depend)


@operation
def target_update(to: Sequence[Any] = (), from_: Sequence[Any] = (),
                  device: int | None = None, nowait: bool = False,
                  depend: Sequence[Handle] = (), stream: Any = None) -> Handle | None:
    """Copy present data (`#pragma omp target update`).

    Args:
        to: arrays (or `to(a, present=True)` clauses) to copy host -> device.
        from_: arrays (or clauses) to copy device -> host.
        device: device number; None for the default device.
        nowait: return at once with a Handle.
        depend: Handles of earlier nowait work to run after (OpenMP's depend clause).
        stream: an `offload.Stream` of the device: the copies go on it, in order with
            what it holds. With `nowait=True` they are only queued (copies of pinned
            memory run asynchronously), dependences on other Stream work of the device
            are waited for on the device, and the Handle completes with the copies.

    Returns:
        None, or a Handle with `nowait=True`.

    Raises:
        OffloadError: INVALID_ARGUMENT for absent data with `present=True` (absent
            data is otherwise skipped), or a read-only array in `from_`.
    """
    dev = _current().construct_device(device)
    if not nowait and not depend and stream is None:
        if dev is not None and not dev.table.observed:
            arrays = dev.table.steps.update_arrays
            if arrays is not None and arrays(to, from_):   # one whole array, one C call
                return None
        motions = _whole_array_motions(to, from_)
        if motions is not None:                # the common case: arrays, nothing else
            if dev is not None:
                table = dev.table
                table.target_data_update(motions)
                if table.info:
                    table.dump_if_asked()
            return None
    items = []
    strided: list[tuple[np.ndarray, bool, bool]] = []
    for seq, motion, what in ((to, MapType.TO, "target_update: to"),
                              (from_, MapType.FROM, "target_update: from_")):
        for m in _strided_out(seq, what, motion is MapType.TO, strided):
            it = m.item() if isinstance(m, MapClause) else MapClause(m, motion).item()
            it.type = (it.type & MapType.PRESENT) | motion
            items.append(it)
    queue = stream_queue(stream, dev, "target_update")
    if queue is not None:
        return _update_on_stream(dev, items, strided, queue, nowait, depend)
    if strided and dev is not None:
        table = dev.table
        contiguous = table.target_data_update

        def update(items: list[MapItem]) -> None:
            contiguous(items)
            for arr, to_device, present in strided:
                _update_strided(dev, arr, to_device, present)
        return _construct(update, items, dev, nowait, depend)
    return _construct(dev.table.target_data_update if dev else None, items, dev, nowait,
                      depend)


def _whole_array_motions(to: Any, from_: Any) -> list[MapItem] | None:
    """The items of an update whose lists hold only contiguous, writeable-where-needed
    numpy arrays of plain dtypes (built without clause objects); None for anything else
    (the general path then checks and explains it)."""
    out: list[MapItem] = []
    for seq, motion in ((to, MapType.TO), (from_, MapType.FROM)):
        if type(seq) is not list and type(seq) is not tuple:
            return None
        for a in seq:
            if type(a) is not np.ndarray:
                return None
            flags = a.flags
            if not flags.c_contiguous or a.dtype.hasobject or \
                    (motion is MapType.FROM and not flags.writeable):
                return None
            p, n = span(a)
            out.append(MapItem(p, n, motion, a, None, not flags.writeable))
    return out


def _update_on_stream(dev: Any, items: list[MapItem],
                      strided: list[tuple[np.ndarray, bool, bool]], queue: Any,
                      nowait: bool, depend: Sequence[Handle]) -> Handle | None:
    """target_update's copies queued on a Stream's queue (see target_update)."""
    deps = check_depend(depend) if depend else ()
    generic, table = dev.generic, dev.table
    queue_after(deps, generic, queue)
    busy: list = []
    try:
        table.target_data_update(items, queue, kept_busy=busy)
        if strided:                          # strided copies run on queues of their own
            dev.synchronize(queue)
            for arr, to_device, present in strided:
                _update_strided(dev, arr, to_device, present)
        table.dump_if_asked()
        if nowait:
            h = _current().nowait.watch(generic, queue,
                                        functools.partial(table.release_busy, busy))
            busy = []
            return h
        dev.synchronize(queue)
        return None
    finally:
        if busy:                             # an error: nothing may still use them
            with contextlib.suppress(Exception):
                dev.synchronize(queue)
            table.release_busy(busy)


def _strided_out(seq: Any, what: str, to_device: bool,
                 strided: list[tuple[np.ndarray, bool, bool]]) -> list[Any]:
    """The entries of `seq` that are contiguous; non-contiguous numpy views (a[:, 3],
    a[::2], a[1:3, 2:5]) go to `strided` as (view, to_device, present)."""
    if not isinstance(seq, (list, tuple)):
        return map_items(seq, MapType.TO, what)          # raises, naming the mistake
    rest = []
    for m in seq:
        arr = m.array if isinstance(m, MapClause) else m
        if isinstance(arr, np.ndarray) and not (arr.flags.c_contiguous or
                                                arr.flags.f_contiguous):
            if arr.dtype.hasobject:
                as_array(arr, what)                      # raises: Python objects
            if not to_device and not arr.flags.writeable:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"{what}: the destination is read-only; pass a "
                                   f"writeable array")
            present = bool(isinstance(m, MapClause) and m.type & MapType.PRESENT)
            strided.append((arr, to_device, present))
        else:
            rest.append(m)
    return rest


def _update_strided(dev: Device, arr: np.ndarray, to_device: bool, present: bool) -> None:
    """A strided update of a view whose bytes lie in one mapping (LLVM's
    non_contiguous_update / strided_update): one strided copy per view, not per element."""
    if arr.size == 0:
        return
    host = int(arr.__array_interface__["data"][0])
    lo, hi = extent(arr.shape, arr.strides, arr.itemsize)
    e = dev.table.acquire_busy(host + lo, hi - lo)      # in use while it copies
    if e is None:
        if present:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"target_update: a strided view at 0x{host + lo:x} "
                               f"({hi - lo} bytes) is not present on device {dev.number} "
                               f"(present modifier)")
        return                                           # absent: nothing (OpenMP)
    try:
        dev.plugin.data_update_strided(dev.local_id, to_device, host,
                                       e.tgt_begin + (host - e.hst_begin), arr.shape,
                                       arr.strides, arr.itemsize)
    finally:
        dev.table.release_busy([e])


def taskwait() -> None:
    """Wait for the `nowait` work the calling thread started (OpenMP's taskwait).

    Work started by other threads is not waited for. Raises the first error among
    the calling thread's work, after all of it has finished."""
    _current().nowait.wait(threading.get_ident())


def shutdown() -> None:
    """Tear the runtime down (also done at exit); the next call starts a fresh one."""
    _shutdown()
