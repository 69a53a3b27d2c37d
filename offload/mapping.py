"""Map clauses and the per-device mapping table (libomptarget's HostDataToTarget).

target_data_begin / target_data_end / target_data_update follow LLVM's rules
(SEMANTICS.md §2). Begin is all or nothing.
"""
from __future__ import annotations

import bisect
import enum
import math
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .arrays import as_array, span
from .config import Info
from .errors import ErrorCode, OffloadError
from .plugins.common import AllocKind, GenericPlugin

INF = math.inf


class MapType(enum.IntFlag):
    """LLVM's tgt_map_type bit values."""

    NONE = 0
    TO = 0x1
    FROM = 0x2
    ALWAYS = 0x4
    DELETE = 0x8
    PTR_AND_OBJ = 0x10
    TARGET_PARAM = 0x20
    RETURN_PARAM = 0x40
    PRIVATE = 0x80
    LITERAL = 0x100
    IMPLICIT = 0x200
    CLOSE = 0x400
    PRESENT = 0x1000
    OMPX_HOLD = 0x2000


@dataclass
class MapItem:
    """One map clause, reduced to addresses at the API edge."""

    host: int
    size: int
    type: MapType
    owner: Any = None
    name: str | None = None
    read_only: bool = False


class MapClause:
    """A map clause over a numpy array (or any contiguous buffer); made by `to`,
    `from_`, `tofrom`, `alloc`, `release` and `delete`."""

    __slots__ = ("array", "type", "name")

    def __init__(self, array: Any, type: MapType, name: str | None = None):
        self.array = array
        self.type = type
        self.name = name

    def item(self) -> MapItem:
        """The clause as addresses: (host address, size, map type, owner, ...)."""
        arr = as_array(self.array, "map")
        p, n = span(arr)
        return MapItem(p, n, self.type, arr, self.name, not arr.flags.writeable)

    def __repr__(self) -> str:
        return f"MapClause({self.type!r}, {self.name or type(self.array).__name__})"


def map_items(maps: Any, default: MapType) -> list[MapItem]:
    """MapItems from clauses, or from bare arrays mapped with `default`."""
    return [m.item() if isinstance(m, MapClause) else MapClause(m, default).item()
            for m in maps]


class HostDataToTarget:
    """One mapping: host range -> device range, with dynamic and hold counts."""

    __slots__ = ("hst_begin", "hst_end", "tgt_begin", "dyn", "hold", "owner", "name",
                 "pinned", "owned", "ready", "failed")

    def __init__(self, hst: int, size: int, tgt: int, name: str | None, owner: Any,
                 owned: bool = True):
        self.hst_begin = hst
        self.hst_end = hst + size
        self.tgt_begin = tgt
        self.dyn: float = 0
        self.hold: float = 0
        self.owner = owner
        self.name = name
        self.pinned = False
        self.owned = owned
        self.ready: threading.Lock | None = None    # held until allocated and filled
        self.failed = False

    @property
    def size(self) -> int:
        return self.hst_end - self.hst_begin

    def total(self) -> float:
        return self.dyn + self.hold

    def __repr__(self) -> str:
        return (f"HostDataToTarget(0x{self.hst_begin:x}+{self.size} -> 0x{self.tgt_begin:x}, "
                f"dyn={self.dyn}, hold={self.hold})")


# plain-int copies of the bits, for the hot path (IntFlag arithmetic is slow)
_TO, _FROM, _ALWAYS, _DELETE = 0x1, 0x2, 0x4, 0x8
_IMPLICIT, _PRESENT, _HOLD = 0x200, 0x1000, 0x2000
_I_EXISTS, _I_CHANGED, _I_TRANSFER = int(Info.MAPPING_EXISTS), int(Info.MAPPING_CHANGED), \
    int(Info.DATA_TRANSFER)


def _count(v: float) -> str:
    return "INF" if v == INF else str(int(v))


class MappingTable:
    """Sorted, non-overlapping mappings of one device; O(log n) lookup."""

    def __init__(self, plugin: GenericPlugin, device: int, number: int, info: Info):
        self.plugin = plugin
        self.device = device          # plugin-local id
        self.number = number          # global device number, for messages
        self.info = int(info)
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._entries: list[HostDataToTarget] = []
        self._by_start: dict[int, HostDataToTarget] = {}   # O(1) for the common exact hit

    # ---- table ------------------------------------------------------------
    def _say(self, msg: str) -> None:
        print(f"omptarget device {self.number} info: {msg}", file=sys.stderr)

    def _find(self, p: int, n: int) -> tuple[HostDataToTarget | None, bool]:
        """(entry overlapping [p, p+n) or containing p, whether it contains the range)."""
        e = self._by_start.get(p)
        if e is not None:
            return e, p + n <= e.hst_end
        starts = self._starts
        i = bisect.bisect_right(starts, p) - 1
        if i >= 0:
            e = self._entries[i]
            if p < e.hst_end:
                return e, p + n <= e.hst_end
        j = i + 1
        if j < len(starts) and starts[j] < p + n:
            return self._entries[j], False
        return None, False

    def lookup(self, p: int, n: int = 1) -> HostDataToTarget | None:
        """The entry containing [p, p+n), or None."""
        with self._lock:
            e, inside = self._find(p, n)
            return e if inside else None

    def overlapping(self, p: int, n: int) -> HostDataToTarget | None:
        """The first entry sharing a byte with [p, p+n)."""
        with self._lock:
            return self._find(p, max(n, 1))[0]

    def _insert(self, e: HostDataToTarget) -> None:
        i = bisect.bisect_left(self._starts, e.hst_begin)
        self._starts.insert(i, e.hst_begin)
        self._entries.insert(i, e)
        self._by_start[e.hst_begin] = e

    def _remove(self, e: HostDataToTarget) -> None:
        i = bisect.bisect_left(self._starts, e.hst_begin)
        if i < len(self._entries) and self._entries[i] is e:
            del self._starts[i]
            del self._entries[i]
            del self._by_start[e.hst_begin]

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[HostDataToTarget]:
        with self._lock:
            return list(self._entries)

    def dump(self) -> str:
        lines = [f"omptarget device {self.number} info: OpenMP Host-Device pointer mappings "
                 f"after block", "omptarget device info: Host Ptr           Target Ptr         "
                 "Size (B) DynRefCount HoldRefCount Declaration"]
        for e in self.entries():
            lines.append(f"omptarget device info: 0x{e.hst_begin:016x} 0x{e.tgt_begin:016x} "
                         f"{e.size:<8} {_count(e.dyn):<11} {_count(e.hold):<12} "
                         f"{e.name or 'unknown'}")
        return "\n".join(lines)

    # ---- begin ------------------------------------------------------------
    def target_data_begin(self, items: Sequence[MapItem], queue: Any = None) -> list[int]:
        """Map every item (all or nothing); return each item's device address."""
        for it in items:
            if it.read_only and int(it.type) & _FROM:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"cannot map read-only memory '{it.name}' at 0x{it.host:x} "
                                   f"from the device (map type {it.type!r})")
        done: list[tuple[MapItem, HostDataToTarget]] = []
        out = []
        try:
            for it in items:
                tgt, e = self._begin_one(it, queue)
                out.append(tgt)
                if e is not None:
                    done.append((it, e))
        except BaseException:
            for it, e in reversed(done):
                self._undo(it, e)
            raise
        return out

    def _begin_one(self, it: MapItem, queue: Any) -> tuple[int, HostDataToTarget | None]:
        """Map one item. A new entry is inserted before its allocation and first copy
        (which run outside the table lock); others that find it wait until it is ready."""
        p, n, t = it.host, it.size, int(it.type)
        hold = bool(t & _HOLD)
        while True:
            with self._lock:
                e, inside = self._find(p, n)
                if e is not None and (inside or t & _IMPLICIT):
                    if hold:
                        e.hold += 1
                    else:
                        e.dyn += 1
                    new = False
                elif e is not None:
                    raise OffloadError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"explicit extension not allowed: host address specified is 0x{p:x} "
                        f"({n} bytes), but device allocation maps to host at "
                        f"0x{e.hst_begin:x} ({e.size} bytes)")
                elif t & _PRESENT:
                    raise OffloadError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"device mapping required by 'present' map type modifier does not "
                        f"exist for host address 0x{p:x} ({n} bytes)")
                elif n == 0:
                    return 0, None
                else:
                    e = HostDataToTarget(p, n, 0, it.name, it.owner)
                    if hold:
                        e.hold = 1
                    else:
                        e.dyn = 1
                    e.ready = threading.Lock()
                    e.ready.acquire()
                    self._insert(e)
                    new = True
            if new:
                return self._make(e, it, queue), e
            if e.ready is not None and e.ready.locked():
                with e.ready:           # wait for its first copy
                    pass
                if e.failed:            # the entry we counted on never came to be
                    continue
            tgt = e.tgt_begin + (p - e.hst_begin)
            if self.info & _I_EXISTS:
                self._say(f"Mapping exists{' (implicit)' if t & _IMPLICIT else ''} with "
                          f"HstPtrBegin=0x{p:x}, TgtPtrBegin=0x{tgt:x}, Size={n}, "
                          f"DynRefCount={_count(e.dyn)}, HoldRefCount={_count(e.hold)}, "
                          f"Name={it.name or 'unknown'}")
            if t & _TO and t & _ALWAYS and n > 0:
                self._copy_to(p, tgt, n, it.name, queue)
            return tgt, e

    def _make(self, e: HostDataToTarget, it: MapItem, queue: Any) -> int:
        """Allocate, pin-reference and fill a new entry; on failure remove it."""
        p, n = it.host, it.size
        ready = e.ready
        assert ready is not None
        try:
            e.tgt_begin = self.plugin.data_alloc(self.device, n, AllocKind.DEVICE)
            if self.info & _I_CHANGED:
                self._say(f"Creating new map entry with HstPtrBase=0x{p:x}, HstPtrBegin=0x{p:x}, "
                          f"TgtAllocBegin=0x{e.tgt_begin:x}, TgtPtrBegin=0x{e.tgt_begin:x}, "
                          f"Size={n}, DynRefCount={_count(e.dyn)}, "
                          f"HoldRefCount={_count(e.hold)}, Name={it.name or 'unknown'}")
            e.pinned = self.plugin.data_notify_mapped(self.device, p, n, it.owner,
                                                      it.read_only) is not None
            if int(it.type) & _TO:
                self._copy_to(p, e.tgt_begin, n, it.name, queue)
        except BaseException:
            with self._lock:
                self._remove(e)
                e.failed = True
            self._release(e)
            ready.release()
            raise
        ready.release()
        return e.tgt_begin

    def _copy_to(self, p: int, tgt: int, n: int, name: str | None, queue: Any) -> None:
        if self.info & _I_TRANSFER:
            self._say(f"Copying data from host to device, HstPtr=0x{p:x}, "
                      f"TgtPtr=0x{tgt:x}, Size={n}, Name={name or 'unknown'}")
        self.plugin.data_submit(self.device, tgt, p, n, queue)

    def _copy_from(self, p: int, tgt: int, n: int, name: str | None, queue: Any) -> None:
        if self.info & _I_TRANSFER:
            self._say(f"Copying data from device to host, TgtPtr=0x{tgt:x}, "
                      f"HstPtr=0x{p:x}, Size={n}, Name={name or 'unknown'}")
        self.plugin.data_retrieve(self.device, p, tgt, n, queue)

    def _undo(self, it: MapItem, e: HostDataToTarget) -> None:
        """Take back the reference `it` took on `e` (no copies)."""
        with self._lock:
            if int(it.type) & _HOLD:
                e.hold -= 1
            else:
                e.dyn -= 1
            gone = e.total() == 0
            if gone:
                self._remove(e)
        if gone:
            self._release(e)

    def _release(self, e: HostDataToTarget) -> None:
        """Free a removed entry's device memory and pin reference."""
        try:
            if e.owned and e.tgt_begin:
                self.plugin.data_delete(self.device, e.tgt_begin, AllocKind.DEVICE)
        finally:
            if e.pinned:
                e.pinned = False
                self.plugin.data_notify_unmapped(self.device, e.hst_begin)
            e.owner = None

    # ---- end --------------------------------------------------------------
    def target_data_end(self, items: Sequence[MapItem], queue: Any = None,
                        copy_back: bool = True) -> None:
        """Unmap every item (in reverse order); copy back per LLVM's rules."""
        gone: list[HostDataToTarget] = []
        error: OffloadError | None = None
        for it in reversed(items):
            p, n, t = it.host, it.size, int(it.type)
            with self._lock:
                e, inside = self._find(p, n)
                if e is None or not (inside or t & _IMPLICIT):
                    if t & _PRESENT and error is None:
                        error = OffloadError(
                            ErrorCode.INVALID_ARGUMENT,
                            f"device mapping required by 'present' map type modifier does not "
                            f"exist for host address 0x{p:x} ({n} bytes)")
                    continue
                if t & _DELETE:
                    if e.dyn != INF:
                        e.dyn = 0
                elif t & _HOLD:
                    e.hold = max(0, e.hold - 1)
                elif e.dyn != INF:
                    e.dyn = max(0, e.dyn - 1)
                last = e.total() == 0
                if last:
                    self._remove(e)
                    gone.append(e)
                    if self.info & _I_CHANGED:
                        self._say(
                            f"Removing map entry with HstPtrBegin=0x{e.hst_begin:x}, "
                            f"TgtPtrBegin=0x{e.tgt_begin:x}, Size={e.size}, "
                            f"Name={e.name or 'unknown'}")
                else:
                    if self.info & _I_EXISTS:
                        self._say(
                            f"Mapping exists with HstPtrBegin=0x{p:x}, TgtPtrBegin="
                            f"0x{e.tgt_begin + p - e.hst_begin:x}, Size={n}, "
                            f"DynRefCount={_count(e.dyn)}, HoldRefCount={_count(e.hold)}, "
                            f"Name={it.name or 'unknown'}")
            if copy_back and t & _FROM and (t & _ALWAYS or last) and n > 0:
                self._copy_from(p, e.tgt_begin + (p - e.hst_begin), n, it.name, queue)
        if gone:
            if queue is not None:
                self.plugin.synchronize(self.device, queue)
            for e in gone:
                self._release(e)
        if error is not None:
            raise error

    # ---- update -----------------------------------------------------------
    def target_data_update(self, items: Sequence[MapItem], queue: Any = None) -> None:
        """Copy present items TO and/or FROM the device; absent ones are skipped."""
        for it in items:
            p, n, t = it.host, it.size, int(it.type)
            if it.read_only and t & _FROM:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"cannot update read-only memory '{it.name}' at 0x{p:x} "
                                   f"from the device")
            e = self.lookup(p, n) if n > 0 else None
            if e is None:
                if t & _PRESENT:
                    raise OffloadError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"device mapping required by 'present' motion modifier does not exist "
                        f"for host address 0x{p:x} ({n} bytes)")
                continue
            tgt = e.tgt_begin + (p - e.hst_begin)
            if t & _TO:
                self._copy_to(p, tgt, n, it.name, queue)
            if t & _FROM:
                self._copy_from(p, tgt, n, it.name, queue)

    # ---- omp_target_associate_ptr -------------------------------------------
    def associate(self, p: int, tgt: int, n: int) -> None:
        with self._lock:
            e, inside = self._find(p, n)
            if e is not None:
                if inside and e.tgt_begin + (p - e.hst_begin) == tgt:
                    return
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"host address 0x{p:x} ({n} bytes) is already mapped to "
                                   f"0x{e.tgt_begin + p - e.hst_begin:x}")
            e = HostDataToTarget(p, n, tgt, "associated", None, owned=False)
            e.dyn = INF
            self._insert(e)

    def disassociate(self, p: int) -> None:
        with self._lock:
            e, _ = self._find(p, 0)
            if e is None or e.hst_begin != p:
                raise OffloadError(ErrorCode.NOT_FOUND,
                                   f"association not found for host address 0x{p:x}")
            if e.dyn != INF or e.owned:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"trying to disassociate 0x{p:x}, which was not mapped via "
                                   f"omp_target_associate_ptr")
            if e.hold:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"trying to disassociate 0x{p:x}, which has a hold reference")
            self._remove(e)

    def clear(self) -> None:
        with self._lock:
            self._starts, self._entries, self._by_start = [], [], {}
