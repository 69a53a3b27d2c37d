"""The per-device mapping table (libomptarget's HostDataToTarget map) and the three
data operations, target_data_begin / target_data_end / target_data_update, with
LLVM's rules (docs/semantics.md, "Mapping"; LLVM's offload/test/mapping).

Begin is all or nothing. Within one construct (all the clauses of one call), the
clauses naming one array act as LLVM's do: the entry is created once, `to` copies
when this construct created it, `from` runs when this construct drops the last
reference whatever the clause order, and each copy happens once.
"""
from __future__ import annotations

import bisect
import ctypes
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from . import _accel, profile, tracing
from ._lazy import numpy as np
from ._lazy import numpy_imported
from .clauses import _NOT_PLAIN, MapClause, MapItem, MapType, clause_text, map_items
from .config import Info
from .diagnostics import (
    NULL_ILLEGAL,
    NULL_PRESENT,
    caller,
    dump_table,
    error,
    explicit_extension,
    present_missing,
    say,
)
from .entries import INF, HostDataToTarget, count_text
from .errors import ErrorCode, OffloadError
from .plugins.common import AllocKind, GenericPlugin

__all__ = ["INF", "HostDataToTarget", "MapClause", "MapItem", "MapType", "MappingTable",
           "map_items"]

# plain-int copies of the bits, for the hot path (IntFlag arithmetic is slow)
_TO, _FROM, _ALWAYS, _DELETE = 0x1, 0x2, 0x4, 0x8
_IMPLICIT, _PRESENT, _HOLD = 0x200, 0x1000, 0x2000
_MEMBER = int(MapType.MEMBER)
_I_EXISTS, _I_DUMP, _I_CHANGED, _I_TRANSFER = (int(Info.MAPPING_EXISTS), int(Info.DUMP_TABLE),
                                               int(Info.MAPPING_CHANGED),
                                               int(Info.DATA_TRANSFER))
TRACED = 1 << 30          # MappingTable.info: a tool hears the data operations (offload.tracing)


def _pending(e: HostDataToTarget) -> threading.Lock | None:
    """The lock to wait on when another thread is still making `e` (allocating and
    filling it) or unmaking it (its last copy back), else None. Whoever finds such an
    entry touches none of its counts: it waits, then looks again (LLVM's map_back_race.cpp:
    a map during the copy back never starts from the stale host copy)."""
    ready = e.ready
    return ready if ready is not None and ready.locked() else None


_here = threading.local()     # .ids: id() of the entries this thread is making or holding


def _mine() -> set[int]:
    ids = getattr(_here, "ids", None)
    if ids is None:
        ids = _here.ids = set()
    return ids


def _held_lock() -> threading.Lock:
    """A new lock, already held: an entry being made, or held through its copy back."""
    lock = threading.Lock()
    lock.acquire()
    return lock


class _Construct:
    """What one construct of several clauses has done so far: the entries it created,
    the copies it made, the `from` copies it put off until it drops the last reference."""

    __slots__ = ("created", "copied_to", "copied_from", "deferred")

    def __init__(self) -> None:
        self.created: set[int] = set()                    # id() of entries made here
        self.copied_to: set[tuple[int, int]] = set()
        self.copied_from: set[tuple[int, int]] = set()
        self.deferred: dict[int, list[MapItem]] = {}      # id(entry) -> `from` items


class MappingTable:
    """Sorted, non-overlapping mappings of one device; O(log n) lookup."""

    def __init__(self, plugin: GenericPlugin, device: int, number: int, info: Info):
        self.plugin = plugin
        self.device = device          # plugin-local id
        self.number = number          # global device number, for messages
        #: LIBOMPTARGET_INFO bits, and TRACED while a tool hears data operations (any bit
        #: keeps a construct off the fewer-steps paths, which tell no one)
        self.info = int(info) | (TRACED if tracing.tool is not None or profile.active is not None
                                 else 0)
        self._dev = plugin.device(device)     # its memory, without the plugin's dispatch
        self._lock = _accel.new_lock(plugin.config)
        self._idle = threading.Condition(self._lock)     # an entry's busy count fell to 0
        self._waiting = 0                                  # threads waiting on _idle
        self._starts: list[int] = []
        self._entries: list[HostDataToTarget] = []
        self._by_start: dict[int, HostDataToTarget] = {}   # O(1) for the common exact hit
        # id(entry) -> threads that dropped its last reference and have not left it yet,
        # and those of them copying it back now (see _drain, _hold, _leave)
        self._leavers: dict[int, int] = {}
        self._holders: dict[int, int] = {}
        self._excused: dict[int, int] = {}     # id(entry) -> busy marks _drain does not wait for
        # on host memory, begin_plain/end_plain in C (the methods below for the rest)
        fast = _accel.accelerate(self, self._dev, HostDataToTarget, AllocKind.DEVICE,
                                 MappingTable.begin_plain, MappingTable.end_plain,
                                 MappingTable._release, MappingTable.update_plain)
        #: with the accelerator: a region's arguments on mapped data, marked in use, as
        #: (device arguments, entries) or None; and release_busy for those entries
        self.present: Callable[..., Any] | None = None
        self.release_present: Callable[[list], Any] = self.release_busy
        #: with the accelerator: target_update(to, from_) of one plain array, done (True),
        #: or None when the lists hold anything else
        self.update_arrays: Callable[[Any, Any], Any] | None = None
        if fast is not None:
            begin, end, update, present, release, arrays = fast
            self.update_arrays = arrays
            if begin is not None and end is not None:
                self.begin_plain, self.end_plain = begin, end  # type: ignore[method-assign]
            if update is not None:
                self.update_plain = update                 # type: ignore[method-assign]
            if present is not None and release is not None:
                self.present, self.release_present = present, release
        #: MapClause.plain for the constructs on this table (in C with the accelerator)
        #: (a C program's library, numpy not imported: its constructs make no MapClause)
        self.plain_of: Callable[[MapClause], Any] = MapClause.plain if not numpy_imported() \
            else _accel.plain_function(plugin.config, np.ndarray, _NOT_PLAIN, MapClause.plain) \
            or MapClause.plain

    # ---- table ------------------------------------------------------------
    def _say(self, msg: str) -> None:
        say(self.number, msg)

    def say_found(self, p: int, n: int, e: HostDataToTarget | None = None) -> None:
        """LLVM's MAPPING_EXISTS line for a lookup that leaves the counts alone (a kernel
        argument, an update): the entry holding [p, p+n), when there is one."""
        if e is None:
            e = self.lookup(p, n)
            if e is None:
                return
        self._say_exists(p, n, e, " (update suppressed)")

    def _say_exists(self, p: int, n: int, e: HostDataToTarget, how: str, hold: bool = False,
                    implicit: bool = False, named: bool = False,
                    name: str | None = None) -> None:
        """LLVM 19's 'Mapping exists ...' line: `how` after the count that changed (the
        hold count with `hold`); `named`: the getTargetPointer form, which names the
        variable."""
        self._say(f"Mapping exists{' (implicit)' if implicit else ''} with "
                  f"HstPtrBegin=0x{p:016x}, TgtPtrBegin=0x{e.tgt_begin + p - e.hst_begin:016x}, "
                  f"Size={n}, DynRefCount={count_text(e.dyn)}{'' if hold else how}, "
                  f"HoldRefCount={count_text(e.hold)}{how if hold else ''}"
                  + (f", Name={name or 'unknown'}" if named else ""))

    def _find(self, p: int, n: int) -> tuple[HostDataToTarget | None, bool]:
        """(entry overlapping [p, p+n) or containing p, whether it contains the range).
        A zero-length range follows LLVM's lookupMapping: it is also held by the entry
        before it whose base lies past it, or by the next entry whose base it reaches
        (a pointer to a section's base is translated)."""
        e = self._by_start.get(p)
        if e is not None:
            return e, p + n <= e.hst_end
        starts = self._starts
        i = bisect.bisect_right(starts, p) - 1
        if n == 0:
            if i >= 0:
                e = self._entries[i]
                if p < e.hst_end or p < e.hst_base:
                    return e, True
            if i + 1 < len(starts) and p >= self._entries[i + 1].hst_base:
                return self._entries[i + 1], True
            return None, False
        if i >= 0:
            e = self._entries[i]
            if p < e.hst_end:
                return e, p + n <= e.hst_end
        j = i + 1
        if j < len(starts) and starts[j] < p + n:
            return self._entries[j], False
        return None, False

    def lookup(self, p: int, n: int = 1) -> HostDataToTarget | None:
        """The entry containing [p, p+n), or None (one another thread is still making:
        once made)."""
        while True:
            with self._lock:
                e, inside = self._find(p, n)
            if e is None or not inside:
                return None
            if self._made([e]):
                return e

    def overlapping(self, p: int, n: int) -> HostDataToTarget | None:
        """The first entry sharing a byte with [p, p+n) (once made, as `lookup`)."""
        while True:
            with self._lock:
                e = self._find(p, max(n, 1))[0]
            if e is None or self._made([e]):
                return e

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

    def holds_device_range(self, addr: int, size: int) -> bool:
        """Whether device bytes [addr, addr+size) lie in one mapping's device copy
        (associated memory and declare target globals included)."""
        with self._lock:
            return any(e.tgt_begin <= addr and addr + size <= e.tgt_begin + e.size
                       for e in self._entries if e.tgt_begin)

    def dump(self, where: str | None = None) -> str:
        """The table as LLVM's dumpTargetPointerMappings prints it."""
        return dump_table(self.number, self.entries(), where or caller())

    def dump_if_asked(self) -> None:
        """Print the table when LIBOMPTARGET_INFO has DUMP_TABLE (after each construct)."""
        if self.info & _I_DUMP:
            print(self.dump(caller()), file=sys.stderr)

    # ---- begin ------------------------------------------------------------
    def target_data_begin(self, items: Sequence[MapItem], queue: Any = None,
                          busy: list[HostDataToTarget] | None = None,
                          around: Callable[[int, int | None], None] | None = None
                          ) -> list[int]:
        """Map every item (all or nothing); return each item's device address. With
        `busy` (an empty list), each entry the items use is also marked in use, in the
        same lock round trip, and appended for `release_busy` (released again on failure).
        `around(i, None)` runs before item i, `around(i, address)` after it (the C edge
        attaches pointers there, in LLVM's order)."""
        if not items:
            return []
        self._check_begin(items)
        # one clause shares nothing with another: no record of the construct is needed
        c = _Construct() if len(items) > 1 else None
        done: list[tuple[MapItem, HostDataToTarget]] = []
        out = []
        try:
            for i, it in enumerate(items):
                if around is not None:
                    around(i, None)
                tgt, e = self._begin_one(it, queue, c, busy)
                out.append(tgt)
                if e is not None:
                    done.append((it, e))
                if around is not None:
                    around(i, tgt)
        except BaseException:
            if busy:
                self.release_busy(busy)
                busy.clear()
            for it, e in reversed(done):
                self._undo(it, e)
            raise
        return out

    def _check_begin(self, items: Sequence[MapItem]) -> None:
        """What can be refused before anything is mapped: `from` into read-only memory,
        and `present` clauses, judged against the table as the construct found it."""
        present = []
        for it in items:
            t = int(it.type)
            if it.read_only and t & _FROM:
                raise error([f"cannot map read-only memory at 0x{it.host:x} ({it.size} bytes) "
                             f"from the device"], it,
                            "map it `to` or `alloc`, or pass a writeable array")
            if t & _PRESENT:
                present.append(it)
        if not present:
            return
        with self._lock:
            for it in present:
                e, inside = self._find(it.host, it.size)
                if e is not None and inside:
                    continue
                sentences = []
                if e is not None and not int(it.type) & _IMPLICIT:
                    sentences.append(explicit_extension(it.host, it.size, e.hst_begin,
                                                        e.size))
                sentences.append(present_missing(it.host, it.size))
                raise error(sentences, it, "map it first (target_enter_data or an enclosing "
                                           "target_data), or drop present=True",
                            after=NULL_PRESENT)

    def _begin_one(self, it: MapItem, queue: Any, c: _Construct | None,
                   busy: list[HostDataToTarget] | None = None
                   ) -> tuple[int, HostDataToTarget | None]:
        """Map one item (`c` None: the construct's only clause). A new entry is inserted
        before its allocation and first copy (which run outside the table lock); others
        that find it wait until it is ready."""
        p, n, t = it.host, it.size, int(it.type)
        while True:
            with self._lock:
                e = self._by_start.get(p)
                if e is not None:
                    inside = p + n <= e.hst_end
                else:
                    e, inside = self._find(p, n)
                pending = None if e is None else _pending(e)
                if pending is not None:
                    pass                          # being made or unmade: wait, look again
                elif e is not None and (inside or t & _IMPLICIT):
                    if t & _MEMBER:
                        pass                      # its struct's mapping counts for it
                    elif t & _HOLD:
                        e.hold += 1
                    else:
                        e.dyn += 1
                    new = False
                elif e is not None:
                    raise error([explicit_extension(p, n, e.hst_begin, e.size)], it,
                                "map the whole array first, or a section inside the mapped "
                                "one", after=NULL_ILLEGAL)
                elif t & _PRESENT:           # unmapped by another thread since the check
                    raise error([present_missing(p, n)], it, "map it first", after=NULL_PRESENT)
                elif n == 0:
                    return 0, None
                else:
                    e = HostDataToTarget(p, n, 0, it.name, it.owner)
                    e.hst_base = it.base
                    if t & _HOLD:
                        e.hold = 1
                    else:
                        e.dyn = 1
                    e.ready = _held_lock()
                    _mine().add(id(e))
                    self._insert(e)
                    new = True
                    if t & _MEMBER:               # no struct mapping: it counts as its own
                        it.type = MapType(t & ~_MEMBER)
                if pending is None and busy is not None:
                    assert e is not None
                    e.busy += 1
                    busy.append(e)
            if pending is not None:
                with pending:           # its first copy, or its last copy back, is done
                    pass
                continue
            assert e is not None
            if new:
                if c is not None:
                    c.created.add(id(e))
                return self._make(e, it, queue, c), e
            tgt = e.tgt_begin + (p - e.hst_begin)
            if self.info & _I_EXISTS:
                self._say_exists(p, n, e,
                                 " (update suppressed)" if t & _MEMBER else " (incremented)",
                                 bool(t & _HOLD), bool(t & _IMPLICIT), True, it.name)
            # LLVM: copy when the entry is new *for this region* (an earlier clause of the
            # construct made it), or always
            if t & _TO and n > 0 and (t & _ALWAYS or (
                    c is not None and id(e) in c.created and (p, n) not in c.copied_to)):
                if c is not None:
                    c.copied_to.add((p, n))
                self._copy_to(p, tgt, n, e.name, queue, e, t)
            return tgt, e

    def _make(self, e: HostDataToTarget, it: MapItem, queue: Any, c: _Construct | None) -> int:
        """Allocate, pin-reference and fill a new entry; on failure remove it."""
        p, n = it.host, it.size
        ready = e.ready
        assert ready is not None
        plugin = self.plugin
        try:
            e.tgt_begin = tgt = self._alloc(p, n)
            if self.info:
                e.where = it.where or caller()
                if self.info & _I_CHANGED:
                    self._say(f"Creating new map entry with HstPtrBase=0x{it.base:016x}, "
                              f"HstPtrBegin=0x{p:016x}, TgtAllocBegin=0x{tgt:016x}, "
                              f"TgtPtrBegin=0x{tgt:016x}, Size={n}, "
                              f"DynRefCount={count_text(e.dyn)}, "
                              f"HoldRefCount={count_text(e.hold)}, Name={it.name or 'unknown'}")
            e.pinned = plugin.data_notify_mapped(self.device, p, n, it.owner,
                                                 it.read_only) is not None
            if int(it.type) & _TO:
                if c is not None:
                    c.copied_to.add((p, n))
                self._copy_to(p, tgt, n, it.name, queue, None, int(it.type))
        except BaseException:
            self._abandon(e)
            raise
        _mine().discard(id(e))
        ready.release()
        return tgt

    def _alloc(self, p: int, n: int) -> int:
        """Device memory for n bytes mapping host memory at p."""
        with tracing.alloc(self.number, p, n) as op:
            op.dst = tgt = self._dev.alloc(n, AllocKind.DEVICE)
        return tgt

    def _abandon(self, e: HostDataToTarget) -> None:
        """Take out a new entry whose making failed; those waiting for it see `failed`."""
        with self._lock:
            self._remove(e)
            e.failed = True
        try:
            self._release(e)
        finally:
            assert e.ready is not None
            _mine().discard(id(e))
            e.ready.release()

    # ---- one plain clause (the common construct), in fewer steps ------------------------
    def begin_plain(self, p: int, n: int, t: int, owner: Any, read_only: bool = False,
                    busy: list[HostDataToTarget] | None = None) -> int:
        """`target_data_begin([item], None, busy)[0]` for one clause mapping [p, p+n)
        (n > 0) whose type has no bits but TO and FROM, on a table without INFO: the same
        effects, in fewer steps when the range starts a ready mapping that holds it, or
        touches none; anything else goes through target_data_begin."""
        with self._lock:
            e = self._by_start.get(p)
            if e is not None:
                made = e.ready
                if p + n <= e.hst_end and (made is None or not made.locked()):
                    e.dyn += 1                          # present: a reference, no copy
                    if busy is not None:
                        e.busy += 1
                        busy.append(e)
                    return e.tgt_begin
                e = None
            elif self._find(p, n)[0] is None:           # nothing there: a new entry
                e = HostDataToTarget(p, n, 0, None, owner)
                e.dyn = 1
                ready = e.ready = _held_lock()
                self._insert(e)
                if busy is not None:
                    e.busy = 1
        if e is None:
            return self.begin_general(p, n, t, owner, read_only, busy)
        plugin = self.plugin
        try:
            e.tgt_begin = tgt = self._dev.alloc(n, AllocKind.DEVICE)
            e.pinned = plugin.data_notify_mapped(self.device, p, n, owner,
                                                 read_only) is not None
            if t & _TO:
                plugin.data_submit(self.device, tgt, p, n)
        except BaseException:
            self._abandon(e)
            raise
        ready.release()
        if busy is not None:
            busy.append(e)
        return tgt

    def end_plain(self, p: int, n: int, t: int, owner: Any,
                  e: HostDataToTarget | None = None, copy_back: bool = True) -> None:
        """`target_data_end([item], None, copy_back, own)` for a clause as begin_plain's,
        then `release_busy([e])` when `e` (the entry begin_plain marked in use for the
        caller) is given: in fewer steps when the mapping starting at p holds the range,
        counts it dynamically and is in use by the caller alone; else through
        target_data_end."""
        own = 0 if e is None else 1
        with self._lock:
            f = self._by_start.get(p)
            fast = (f is not None and (e is None or f is e) and p + n <= f.hst_end
                    and f.busy == own and 1 <= f.dyn < INF
                    and (f.ready is None or not f.ready.locked()))   # not being made
            if fast:
                assert f is not None
                f.dyn -= 1
                last = f.dyn + f.hold == 0
                back = last and copy_back and t & _FROM
                if back:                   # kept, held, until copied back
                    self._leavers[id(f)] = 1
                    self._hold(f)
                elif last:
                    self._remove(f)
                if own:
                    f.busy = 0
                    if self._waiting:
                        self._idle.notify_all()
        if not fast:
            self.end_general(p, n, t, owner, e, copy_back)
            return
        if back:
            assert f is not None
            try:
                self._copy_from(p, f.tgt_begin, n, f.name, None, f, t)
            finally:
                self._leave(f)
        elif last:
            assert f is not None
            self._release(f)

    def update_plain(self, p: int, n: int, t: int) -> None:
        """`target_data_update([item])` for one item over [p, p+n) (n > 0) of type TO or
        FROM, without INFO: copied now when present, skipped when absent."""
        self.target_data_update([MapItem(p, n, MapType(t), None)])

    def begin_general(self, p: int, n: int, t: int, owner: Any, read_only: bool = False,
                      busy: list[HostDataToTarget] | None = None) -> int:
        """begin_plain's effect through target_data_begin (its path for anything else)."""
        return self.target_data_begin([MapItem(p, n, MapType(t), owner, None, read_only)],
                                      None, busy)[0]

    def end_general(self, p: int, n: int, t: int, owner: Any,
                    e: HostDataToTarget | None = None, copy_back: bool = True) -> None:
        """end_plain's effect through target_data_end (its path for anything else)."""
        try:
            self.target_data_end([MapItem(p, n, MapType(t), owner)], None, copy_back,
                                 () if e is None else (e,))
        finally:
            if e is not None:
                self.release_busy([e])

    def _copy_to(self, p: int, tgt: int, n: int, name: str | None, queue: Any,
                 e: HostDataToTarget | None = None, t: int = _TO, motion: bool = False
                 ) -> None:
        if self.info & _I_TRANSFER:
            self._say(f"Copying data from host to device, HstPtr=0x{p:016x}, "
                      f"TgtPtr=0x{tgt:016x}, Size={n}, Name={name or 'unknown'}")
        prof = profile.active
        if prof is not None:
            prof.clause(clause_text(t, name, motion))
        try:
            with tracing.submit(self.number, tgt, p, n):
                self.plugin.data_submit(self.device, tgt, p, n, queue)
        finally:
            if prof is not None:
                prof.clause(None)
        if e is not None and e.shadows:       # the copy brought host pointers along:
            if queue is not None:             # their device values go back on top
                self.plugin.synchronize(self.device, queue)
            for addr, (_, dev_value) in list(e.shadows.items()):
                if p <= addr and addr + 8 <= p + n:
                    self._store_pointer(e, addr, dev_value)

    def _copy_from(self, p: int, tgt: int, n: int, name: str | None, queue: Any,
                   e: HostDataToTarget | None = None, t: int = _FROM, motion: bool = False
                   ) -> None:
        if self.info & _I_TRANSFER:
            self._say(f"Copying data from device to host, TgtPtr=0x{tgt:016x}, "
                      f"HstPtr=0x{p:016x}, Size={n}, Name={name or 'unknown'}")
        prof = profile.active
        if prof is not None:
            prof.clause(clause_text(t, name, motion, ending=True))
        try:
            with tracing.retrieve(self.number, p, tgt, n):
                self.plugin.data_retrieve(self.device, p, tgt, n, queue)
        finally:
            if prof is not None:
                prof.clause(None)
        if e is not None and e.shadows:       # device pointers came back: the host
            if queue is not None:             # keeps its own values
                self.plugin.synchronize(self.device, queue)
            for addr, (host_value, _) in list(e.shadows.items()):
                if p <= addr and addr + 8 <= p + n:
                    ctypes.c_uint64.from_address(addr).value = host_value

    # ---- pointers attached to device data (LLVM's shadow pointers) ----------------
    def say_pointer(self, ptr: int, implicit: bool, member: bool) -> None:
        """LLVM 19's MAPPING_EXISTS line for its lookup of an attached pointer (the base of
        a PTR_AND_OBJ component), when a mapping holds it."""
        e = self.lookup(ptr, 8)
        if e is not None:
            self._say_exists(ptr, 8, e, " (update suppressed)" if member else " (incremented)",
                             implicit=implicit, named=True)

    def attach(self, ptr: int, host_value: int, dev_value: int) -> bool:
        """Make the device copy of the host pointer at `ptr` (inside a mapping) hold
        `dev_value`, remembered so that later copies of the mapping keep it on the device
        and `host_value` on the host. False when no mapping holds the pointer; the
        pointer is written only when new or changed, as LLVM does."""
        with self._lock:
            e, inside = self._find(ptr, 8)
            if e is None or not inside:
                return False
            shadows = e.shadows if e.shadows is not None else {}
            old = shadows.get(ptr)
            shadows[ptr] = (host_value, dev_value)
            e.shadows = shadows
            if old is not None and old[1] == dev_value:
                return True
        self._store_pointer(e, ptr, dev_value)
        return True

    def _store_pointer(self, e: HostDataToTarget, ptr: int, value: int) -> None:
        """Write the 8-byte `value` into the device copy of the pointer at host `ptr`."""
        buf = ctypes.c_uint64(value)
        src = ctypes.addressof(buf)
        tgt = e.tgt_begin + (ptr - e.hst_begin)
        if self.info & _I_TRANSFER:
            self._say(f"Copying data from host to device, HstPtr=0x{src:016x}, "
                      f"TgtPtr=0x{tgt:016x}, Size=8, Name={e.name or 'unknown'}")
        with tracing.submit(self.number, tgt, src, 8):
            self.plugin.data_submit(self.device, tgt, src, 8)

    def _undo(self, it: MapItem, e: HostDataToTarget) -> None:
        """Take back the reference `it` took on `e` (no copies)."""
        t = int(it.type)
        if t & _MEMBER:
            return                                 # it took none
        with self._lock:
            if t & _HOLD:
                e.hold -= 1
            else:
                e.dyn -= 1
            gone = e.total() == 0 and id(e) not in self._leavers   # else they take it out
            if gone:
                self._remove(e)
        if gone:
            self._release(e)

    def _release(self, e: HostDataToTarget) -> None:
        """Free a removed entry's device memory and pin reference."""
        try:
            if e.owned and e.tgt_begin:
                with tracing.delete(self.number, e.tgt_begin):
                    self._dev.free(e.tgt_begin, AllocKind.DEVICE)
        finally:
            if e.pinned:
                e.pinned = False
                self.plugin.data_notify_unmapped(self.device, e.hst_begin)
            e.owner = None

    # ---- end --------------------------------------------------------------
    def target_data_end(self, items: Sequence[MapItem], queue: Any = None,
                        copy_back: bool = True,
                        own: Sequence[HostDataToTarget] = ()) -> None:
        """Unmap every item, last clause first. `from` copies back when this construct
        drops the last reference (whatever the clause order) or with `always`, once per
        range; the entries go after their copies have finished, and after any other work
        in flight on them (`own`: the caller's own busy marks, not waited for). An entry
        stays in the table, held, through its last copy back (LLVM's map_back_race.cpp):
        who maps it meanwhile waits, then maps the host copy it brought back."""
        if not items:
            return
        if copy_back:
            for it in items:
                if it.read_only and int(it.type) & _FROM:
                    raise error([f"cannot copy device data back into read-only memory at "
                                 f"0x{it.host:x} ({it.size} bytes)"], it,
                                "unmap it with release(a) or delete(a), or pass a writeable "
                                "array")
        c = _Construct() if len(items) > 1 else None     # as in target_data_begin
        dying: list[HostDataToTarget] = []               # last reference dropped here
        copies: list[tuple[int, int, HostDataToTarget, int]] = []
        error_: OffloadError | None = None
        held: list[HostDataToTarget] = []
        synced = queue is None
        try:
            for it in reversed(items):
                try:
                    self._end_one(it, c, copy_back, dying, copies)
                except OffloadError as exc:  # keep unmapping the others; raise the first
                    error_ = error_ or exc
            if dying:
                self._drain(dying, own, held)
            for p, n, e, t in copies:
                try:
                    self._copy_back(p, n, e, queue, t)
                except OffloadError as exc:
                    error_ = error_ or exc
            if dying and queue is not None:
                self.plugin.synchronize(self.device, queue)
            synced = True
        finally:
            if dying and not held:                 # interrupted before the drain: no copy,
                self._drain(dying, own, held, wait=False)      # and the memory is kept
                synced = False
            for e in held:
                self._leave(e, synced)
        if error_ is not None:
            raise error_

    def _drain(self, dying: list[HostDataToTarget], own: Sequence[HostDataToTarget],
               held: list[HostDataToTarget], wait: bool = True) -> None:
        """Wait until no work in flight but the caller's own uses the entries whose last
        reference went (nothing held yet: a thread in flight may wait on what this one
        holds), then hold each for its copy back (appended to `held`, also when the wait is
        interrupted); `wait` False: at once."""
        excused = self._excused     # busy marks of threads unmapping the entry themselves
        with self._lock:            # (their work on it is done; each waiting on the others'
            for e in dying:         # marks would never end), _end_one's mark included
                excused[id(e)] = excused.get(id(e), 0) + own.count(e) + 1
            try:
                if wait and any(e.busy > excused[id(e)] for e in dying):
                    if self._waiting:
                        self._idle.notify_all()        # another unmapper's wait may be over
                    self._wait_idle(lambda: all(e.busy <= excused[id(e)] for e in dying))
            finally:
                for e in dying:
                    left = excused.pop(id(e)) - own.count(e) - 1
                    if left:
                        excused[id(e)] = left
                    e.busy -= 1
                    self._hold(e)
                    held.append(e)

    def _hold(self, e: HostDataToTarget) -> None:
        """(Table lock held.) One more thread copies `e` back now; while any does,
        `e.ready` is held and who finds `e` waits, touching none of its counts. Only
        threads that wait for nothing else hold an entry (no cycle of waits)."""
        n = self._holders.get(id(e), 0)
        if n == 0:
            e.ready = _held_lock()
        self._holders[id(e)] = n + 1
        _mine().add(id(e))

    def _leave(self, e: HostDataToTarget, free: bool = True) -> None:
        """One thread's last copy back of `e` is done (LLVM's postProcessingTargetDataEnd,
        with its data-end thread count): the last of the threads that dropped its last
        reference takes it out, unless it was mapped again meanwhile (its memory freed
        unless `free` is False: copies may still be reading it); then those waiting look
        again."""
        _mine().discard(id(e))
        with self._lock:
            leaving = None
            n = self._holders.pop(id(e)) - 1
            if n:
                self._holders[id(e)] = n
            else:
                leaving, e.ready = e.ready, None
            n = self._leavers.pop(id(e)) - 1
            if n:
                self._leavers[id(e)] = n
            gone = n == 0 and e.total() == 0
            if gone:
                self._remove(e)
                e.failed = True               # gone: whoever waited finds it no more
        try:
            if gone and self.info & _I_CHANGED:
                self._say(f"Removing map entry with HstPtrBegin=0x{e.hst_begin:016x}, "
                          f"TgtPtrBegin=0x{e.tgt_begin:016x}, Size={e.size}, "
                          f"Name={e.name or 'unknown'}")
            if gone and free:
                self._release(e)
        finally:
            if leaving is not None:
                leaving.release()

    def _end_one(self, it: MapItem, c: _Construct | None, copy_back: bool,
                 dying: list[HostDataToTarget],
                 copies: list[tuple[int, int, HostDataToTarget, int]]) -> None:
        """One clause's reference dropped; the copies back it calls for are appended to
        `copies` (made once the construct's entries are drained)."""
        p, n, t = it.host, it.size, int(it.type)
        while True:
            made = None               # an entry another thread is making or unmaking
            with self._lock:
                e = None
                for dy in dying:                   # usually none: no generator on the hot path
                    if dy.hst_begin <= p and p + n <= dy.hst_end:
                        e = dy
                        break
                released_before = e is not None
                if e is None:
                    e = self._by_start.get(p)
                    if e is not None:
                        inside = p + n <= e.hst_end
                    else:
                        e, inside = self._find(p, n)
                    if e is not None:
                        made = _pending(e)
                    if made is not None:
                        pass                       # wait for it, then look again
                    elif e is None or not (inside or t & _IMPLICIT):
                        if t & _PRESENT:
                            raise error([present_missing(p, n)], it,
                                        "it was never mapped, or was unmapped already")
                        return
                    else:
                        if t & _MEMBER:
                            pass                           # its struct's mapping counts for it
                        elif t & _DELETE:
                            if e.dyn != INF:
                                e.dyn = 0
                        elif t & _HOLD:
                            e.hold = max(0, e.hold - 1)
                        elif e.dyn != INF:
                            e.dyn = max(0, e.dyn - 1)
                        last = e.dyn + e.hold == 0 and not t & _MEMBER
                        if self.info & _I_EXISTS:           # LLVM's words for what happened
                            how = (" (update suppressed)" if t & _MEMBER else " (decremented)"
                                   if not last else " (reset, delayed deletion)"
                                   if t & _DELETE else
                                   " (decremented, delayed deletion)")
                            self._say_exists(p, n, e, how, bool(t & _HOLD))
                        if last:                   # drained, held and taken out later;
                            e.busy += 1            # marked meanwhile, so that no fewer-steps
                            dying.append(e)        # path frees it if it is mapped again
                            self._leavers[id(e)] = self._leavers.get(id(e), 0) + 1
                else:
                    last = False
            if made is None:
                break
            with made:
                pass
        assert e is not None
        if not copy_back or not t & _FROM and c is None:
            return
        if c is None:                          # the only clause: copy now or never
            if n > 0 and (t & _ALWAYS or last or released_before):
                copies.append((p, n, e, t))
            return
        todo: list[MapItem] = []
        if t & _FROM and n > 0:
            if t & _ALWAYS or last or released_before:
                todo.append(it)
            else:                          # honoured if this construct drops the last one
                c.deferred.setdefault(id(e), []).append(it)
        if last:
            todo += c.deferred.pop(id(e), [])
        for d in todo:
            key = (d.host, d.size)
            if key in c.copied_from:
                continue
            c.copied_from.add(key)
            copies.append((d.host, d.size, e, int(d.type)))

    def _copy_back(self, p: int, n: int, e: HostDataToTarget, queue: Any, t: int = _FROM
                   ) -> None:
        """Copy [p, p+n) back from entry `e`, as far as `e` holds it: an implicit item may
        meet a smaller mapping (another thread released the region's own and mapped a part
        of the array since); the bytes outside it have no device copy to come from."""
        lo, hi = max(p, e.hst_begin), min(p + n, e.hst_end)
        if hi > lo:
            self._copy_from(lo, e.tgt_begin + (lo - e.hst_begin), hi - lo, e.name, queue, e,
                            t)

    # ---- update -----------------------------------------------------------
    def target_data_update(self, items: Sequence[MapItem], queue: Any = None,
                           hold: list[HostDataToTarget] | None = None) -> None:
        """Copy present items TO and/or FROM the device; absent ones are skipped. With
        `hold`, the copies are only queued on `queue` and the entries they use stay
        marked in use, appended to `hold` for `release_busy` once the queue has run."""
        for it in items:
            if it.read_only and int(it.type) & _FROM:
                raise error([f"cannot update read-only memory at 0x{it.host:x} "
                             f"({it.size} bytes) from the device"], it,
                            "pass a writeable array")
        for it in items:
            p, n, t = it.host, it.size, int(it.type)
            e = self.acquire_busy(p, n) if n > 0 else None
            if e is None:
                if t & _PRESENT:
                    raise error([present_missing(p, n, motion=True)], it,
                                "map it first, or drop present=True")
                continue
            try:
                tgt = e.tgt_begin + (p - e.hst_begin)
                if self.info & _I_EXISTS:
                    self.say_found(p, n, e)
                if t & _TO:
                    self._copy_to(p, tgt, n, e.name, queue, e, _TO, motion=True)
                if t & _FROM:
                    self._copy_from(p, tgt, n, e.name, queue, e, _FROM, motion=True)
                if queue is not None and hold is None:
                    self.plugin.synchronize(self.device, queue)
            except BaseException:
                if hold is not None:
                    self.plugin.synchronize(self.device, queue)
                raise
            finally:
                if hold is None:
                    self.release_busy([e])
                else:
                    hold.append(e)

    # ---- work in flight keeps its entries ------------------------------------------
    def acquire_busy(self, p: int, n: int) -> HostDataToTarget | None:
        """The entry containing [p, p+n), marked in use (its device memory stays until
        `release_busy`), or None."""
        while True:
            with self._lock:
                e, inside = self._find(p, n)
                if e is None or not inside:
                    return None
                pending = _pending(e)
                if pending is None:
                    e.busy += 1
                    return e
            with pending:                         # being made or unmade: look again
                pass

    @staticmethod
    def _made(entries: Sequence[HostDataToTarget]) -> bool:
        """Wait until no entry of `entries` is still being made or copied back by another
        thread; False when one never came to be (or went). An entry this thread is making
        or copying back (a tool's callback asking about it) counts as there."""
        ok = True
        mine = _mine()
        for e in entries:
            made = e.ready
            if made is not None and made.locked() and id(e) not in mine:
                with made:
                    pass
                ok = ok and not e.failed
        return ok

    def mark_busy_for(self, ranges: Sequence[tuple[int, int]]) -> list[HostDataToTarget]:
        """Mark in use (see `acquire_busy`) each entry overlapping one of the host ranges,
        once; return them for `release_busy`."""
        if not ranges:
            return []
        while True:
            out: list[HostDataToTarget] = []
            with self._lock:
                pending = None
                for p, n in ranges:
                    e = self._find(p, max(n, 1))[0]
                    if e is not None and e not in out:
                        pending = _pending(e)
                        if pending is not None:
                            break
                        out.append(e)
                if pending is None:
                    for e in out:
                        e.busy += 1
                    return out
            with pending:                         # being made or unmade: look again
                pass

    def mark_busy_each(self, ranges: Sequence[tuple[int, int]]
                       ) -> list[HostDataToTarget] | None:
        """The entry sharing a byte with each host range, in order, each marked in use
        once per range (see `acquire_busy`); None, with nothing marked, when a range has
        no entry (or one another thread was making never came to be)."""
        out: list[HostDataToTarget] = []
        with self._lock:
            for p, n in ranges:
                e = self._by_start.get(p)
                if e is None:
                    e = self._find(p, max(n, 1))[0]
                if e is None or _pending(e) is not None:    # the general path decides
                    return None
                out.append(e)
            for e in out:
                e.busy += 1
        return out

    def wait_idle(self, p: int, n: int, timeout: float = 60.0) -> None:
        """Wait until no operation in flight uses the entries overlapping [p, p+n)."""
        with self._lock:
            self._wait_idle(lambda: all(e.busy == 0 for e in self._entries
                                        if e.hst_begin < p + max(n, 1) and p < e.hst_end),
                            timeout)

    def _wait_idle(self, done: Any, timeout: float | None = None) -> None:
        """Wait (the table lock held) until `done()`, woken by `release_busy`."""
        self._waiting += 1
        try:
            self._idle.wait_for(done, timeout)
        finally:
            self._waiting -= 1

    def release_busy(self, entries: Sequence[HostDataToTarget]) -> None:
        with self._lock:
            for e in entries:
                e.busy -= 1
            if self._waiting:
                self._idle.notify_all()

    # ---- omp_target_associate_ptr -------------------------------------------
    def associate(self, p: int, tgt: int, n: int, name: str = "associated") -> None:
        with self._lock:
            e, inside = self._find(p, n)
            if e is not None:
                if e.hst_begin == p and e.hst_end == p + n and e.tgt_begin == tgt:
                    return                      # the same association again: a no-op
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"Not allowed to re-associate pointer 0x{p:x} ({n} bytes): "
                                   f"it is mapped to 0x{e.tgt_begin + p - e.hst_begin:x}")
            e = HostDataToTarget(p, n, tgt, name, None, owned=False)
            e.dyn = INF
            self._insert(e)

    def disassociate(self, p: int) -> None:
        with self._lock:
            e = self._by_start.get(p)
            if e is None:
                raise OffloadError(ErrorCode.NOT_FOUND, "Association not found")
            if e.hold:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   "Trying to disassociate a pointer with a non-zero hold "
                                   "reference count")
            if e.dyn != INF or e.owned:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   "Trying to disassociate a pointer which was not mapped via "
                                   "omp_target_associate_ptr")
            self._remove(e)

    def clear(self) -> None:
        with self._lock:                  # in place: the accelerator holds these objects
            self._starts.clear()
            self._entries.clear()
            self._by_start.clear()
            self._leavers.clear()
            self._holders.clear()
            self._excused.clear()
