"""The mapping table's state (issue 26: one owner): its sorted entries, their lookup,
busy marks and associations, and the messages LIBOMPTARGET_INFO asks for. The rules
that change entries are in begin.py, end.py and motion.py; MappingTable joins them."""
from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

from .. import _accel, entries, locks, profile, tracing
from ..clauses import MapItem, MapType
from ..config import Info
from ..diagnostics import (
    caller,
    dump_table,
    say,
)
from ..entries import INF, HostDataToTarget, count_text
from ..errors import ErrorCode, OffloadError
from ..plugins.common import GenericPlugin
from .core import TableCore
from .memory import DeviceMemory

# plain-int copies of the bits, for the hot path (IntFlag arithmetic is slow)
_TO, _FROM, _ALWAYS, _DELETE = 0x1, 0x2, 0x4, 0x8
_IMPLICIT, _PRESENT, _HOLD = 0x200, 0x1000, 0x2000
_MEMBER = int(MapType.MEMBER)
_I_EXISTS, _I_DUMP, _I_CHANGED, _I_TRANSFER = (int(Info.MAPPING_EXISTS), int(Info.DUMP_TABLE),
                                               int(Info.MAPPING_CHANGED),
                                               int(Info.DATA_TRANSFER))


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
    """A new latch, already held: an entry being made, or held through its copy back."""
    return locks.latch()  # type: ignore[no-any-return]


class _Construct:
    """What one construct of several clauses has done so far: the entries it created,
    the copies it made, the `from` copies it put off until it drops the last reference."""

    __slots__ = ("created", "copied_to", "copied_from", "deferred")

    def __init__(self) -> None:
        self.created: set[int] = set()                    # id() of entries made here
        self.copied_to: set[tuple[int, int]] = set()
        self.copied_from: set[tuple[int, int]] = set()
        self.deferred: dict[int, list[MapItem]] = {}      # id(entry) -> `from` items



class TableState:
    """Sorted, non-overlapping mappings of one device; O(log n) lookup."""

    def __init__(self, plugin: GenericPlugin, device: int, number: int, info: Info):
        self.plugin = plugin
        self.device = device          # plugin-local id
        self.number = number          # global device number, for messages
        self._info = int(info)
        self._traced = tracing.tool is not None or profile.active is not None
        self._dev = plugin.device(device)     # its memory, without the plugin's dispatch
        #: its memory as the general rules reach it, each step told to a tool
        self.memory = DeviceMemory(plugin, device, number)
        self._lock = _accel.new_lock(plugin.config)
        core_type = _accel.table_core_type(plugin.config, TableCore, entries.HostDataToTarget)
        #: the one owner of the entries, the lock, the idle condition and `observed`
        #: (compiled, or its pure-Python twin: offload/mapping/core.py)
        self._core = core = core_type(self._lock, threading.Condition(self._lock))
        self._idle = core.idle                             # an entry's busy count fell to 0
        self._entry = core.entry_type
        #: INFO bits or a listener: the one table-level test of every fewer-steps path
        #: (Python's and the compiled core's), which tell no one. Set with the core's copy,
        #: which the compiled paths read, by `_observe` alone.
        self.observed = False
        self._observe()
        # id(entry) -> threads that dropped its last reference and have not left it yet,
        # and those of them copying it back now (see _drain, _hold, _leave)
        self._leavers: dict[int, int] = {}
        self._holders: dict[int, int] = {}
        self._excused: dict[int, int] = {}     # id(entry) -> busy marks _drain does not wait for

    @property
    def info(self) -> int:
        """LIBOMPTARGET_INFO's bits for this device (offload.config.Info)."""
        return self._info

    @info.setter
    def info(self, bits: int) -> None:
        self._info = int(bits)
        self._observe()

    @property
    def traced(self) -> bool:
        """Whether a tool (OMPT, offload.tracing) or LIBOMPTARGET_PROFILE hears this
        table's data operations."""
        return self._traced

    @traced.setter
    def traced(self, yes: bool) -> None:
        self._traced = bool(yes)
        self._observe()

    def _observe(self) -> None:
        """`observed` (and the core's copy) from the INFO bits and the listeners."""
        self.observed = self._core.observed = bool(self._info) or self._traced

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

    def lookup(self, p: int, n: int = 1) -> HostDataToTarget | None:
        """The entry containing [p, p+n), or None (one another thread is still making:
        once made)."""
        while True:
            with self._lock:
                e, inside = self._core.find(p, n)
            if e is None or not inside:
                return None
            if self._made([e]):
                return e

    def overlapping(self, p: int, n: int) -> HostDataToTarget | None:
        """The first entry sharing a byte with [p, p+n) (once made, as `lookup`)."""
        while True:
            with self._lock:
                e = self._core.find(p, max(n, 1))[0]
            if e is None or self._made([e]):
                return e

    def __len__(self) -> int:
        return len(self._core)

    def entries(self) -> list[HostDataToTarget]:
        with self._lock:
            return self._core.entries()  # type: ignore[no-any-return]

    def holds_device_range(self, addr: int, size: int) -> bool:
        """Whether device bytes [addr, addr+size) lie in one mapping's device copy
        (associated memory and declare target globals included)."""
        with self._lock:
            return any(e.tgt_begin <= addr and addr + size <= e.tgt_begin + e.size
                       for e in self._core.entries() if e.tgt_begin)

    def dump(self, where: str | None = None) -> str:
        """The table as LLVM's dumpTargetPointerMappings prints it."""
        return dump_table(self.number, self.entries(), where or caller())

    def dump_if_asked(self) -> None:
        """Print the table when LIBOMPTARGET_INFO has DUMP_TABLE (after each construct)."""
        if self.info & _I_DUMP:
            print(self.dump(caller()), file=sys.stderr)

    def _release(self, e: HostDataToTarget) -> None:
        """Free a removed entry's device memory and pin reference."""
        try:
            if e.owned and e.tgt_begin:
                self.memory.free(e.tgt_begin)
        finally:
            if e.pinned:
                e.pinned = False
                self.plugin.data_notify_unmapped(self.device, e.hst_begin)
            e.owner = None

    # ---- work in flight keeps its entries ------------------------------------------
    def acquire_busy(self, p: int, n: int) -> HostDataToTarget | None:
        """The entry containing [p, p+n), marked in use (its device memory stays until
        `release_busy`), or None."""
        while True:
            with self._lock:
                e, inside = self._core.find(p, n)
                if e is None or not inside:
                    return None
                pending = _pending(e)
                if pending is None:
                    self._core.mark(e)
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

    def mark_busy_found(self, ranges: Sequence[tuple[int, int]]
                        ) -> list[HostDataToTarget | None]:
        """For each host range, in order, the first entry sharing a byte with it, marked in
        use once per range (see `acquire_busy`; the marked ones go to `release_busy`), or
        None when none does: what is found is held in the same step."""
        while True:
            out: list[HostDataToTarget | None] = []
            with self._lock:
                pending = None
                for p, n in ranges:
                    e = self._core.find(p, max(n, 1))[0]
                    if e is not None:
                        pending = _pending(e)
                        if pending is not None:
                            break
                    out.append(e)
                if pending is None:
                    for e in out:
                        if e is not None:
                            self._core.mark(e)
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
                e = self._core.get(p)
                if e is None:
                    e = self._core.find(p, max(n, 1))[0]
                if e is None or _pending(e) is not None:    # the general path decides
                    return None
                out.append(e)
            for e in out:
                self._core.mark(e)
        return out

    def wait_idle(self, p: int, n: int, timeout: float = 60.0) -> None:
        """Wait until no operation in flight uses the entries overlapping [p, p+n)."""
        with self._lock:
            self._wait_idle(lambda: all(e.busy == 0 for e in self._core.entries()
                                        if e.hst_begin < p + max(n, 1) and p < e.hst_end),
                            timeout)

    def _wait_idle(self, done: Any, timeout: float | None = None) -> None:
        """Wait (the table lock held) until `done()`, woken by `release_busy`."""
        core = self._core
        core.waiting += 1
        try:
            self._idle.wait_for(done, timeout)
        finally:
            core.waiting -= 1

    def release_busy(self, entries: Sequence[HostDataToTarget]) -> None:
        with self._lock:
            self._core.unmark(entries)

    # ---- omp_target_associate_ptr -------------------------------------------
    def associate(self, p: int, tgt: int, n: int, name: str = "associated") -> None:
        with self._lock:
            e, inside = self._core.find(p, n)
            if e is not None:
                if e.hst_begin == p and e.hst_end == p + n and e.tgt_begin == tgt:
                    return                      # the same association again: a no-op
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"Not allowed to re-associate pointer 0x{p:x} ({n} bytes): "
                                   f"it is mapped to 0x{e.tgt_begin + p - e.hst_begin:x}")
            e = self._entry(p, n, tgt, name, None, owned=False)
            self._core.reference_forever(e)
            self._core.insert(e)

    def disassociate(self, p: int) -> None:
        with self._lock:
            e = self._core.get(p)
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
            self._core.remove(e)

    def clear(self) -> None:
        with self._lock:
            self._core.clear()
            self._leavers.clear()
            self._holders.clear()
            self._excused.clear()
