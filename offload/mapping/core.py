"""The table core: the one owner of a mapping table's entries (sorted, non-overlapping),
their reference and busy counts, its lock, the condition busy marks wait on and the
`observed` flag every fewer-steps path reads. Every path (the general rules, the
fewer-steps paths, the C ABI, regions) finds, counts and marks entries through these
methods. This is the pure-Python twin of the compiled `TableCore` (offload/accel_c/table.c
and entry.c); OFFLOAD_ACCEL chooses, and the suite runs on both.
"""
from __future__ import annotations

import bisect
from typing import Any

from ..entries import INF, HostDataToTarget


class TableCore:
    """Sorted, non-overlapping entries of one table; O(log n) lookup, O(1) exact hit."""

    __slots__ = ("lock", "idle", "waiting", "observed", "_starts", "_entries", "_by_start")
    entry_type = HostDataToTarget

    def __init__(self, lock: Any, idle: Any):
        self.lock = lock
        self.idle = idle               # an entry's busy count fell to 0 (told under lock)
        self.waiting = 0               # threads waiting on idle
        self.observed = False          # INFO bits or a listener: fewer-steps paths stand aside
        self._starts: list[int] = []
        self._entries: list[HostDataToTarget] = []
        self._by_start: dict[int, HostDataToTarget] = {}

    def get(self, p: int) -> HostDataToTarget | None:
        """The entry starting at p, or None."""
        return self._by_start.get(p)

    def find(self, p: int, n: int) -> tuple[HostDataToTarget | None, bool]:
        """(entry overlapping [p, p+n) or containing p, whether it holds the range). A
        zero-length range follows LLVM's lookupMapping: it is also held by the entry before
        it whose base lies past it, or by the next entry whose base it reaches (a pointer
        to a section's base is translated)."""
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

    def insert(self, e: HostDataToTarget) -> None:
        """Put `e` in at its place (its host range never changes while it is in)."""
        if type(e) is not HostDataToTarget:
            raise TypeError(f"TableCore.insert: {e!r} is not an entry of this core")
        if e.hst_begin in self._by_start:
            raise ValueError(f"TableCore.insert: an entry already starts at 0x{e.hst_begin:x}")
        i = bisect.bisect_left(self._starts, e.hst_begin)
        self._starts.insert(i, e.hst_begin)
        self._entries.insert(i, e)
        self._by_start[e.hst_begin] = e

    def remove(self, e: HostDataToTarget) -> None:
        """Take `e` out, if it is in."""
        i = bisect.bisect_left(self._starts, e.hst_begin)
        if i < len(self._entries) and self._entries[i] is e:
            del self._starts[i]
            del self._entries[i]
            del self._by_start[e.hst_begin]

    def entries(self) -> list[HostDataToTarget]:
        """The entries, sorted by host address (a new list)."""
        return list(self._entries)

    def clear(self) -> None:
        """Every entry out."""
        self._starts.clear()
        self._entries.clear()
        self._by_start.clear()

    def __len__(self) -> int:
        return len(self._entries)

    # ---- the counts: the one place they change (the table lock held) ------------------------
    @staticmethod
    def reference(e: HostDataToTarget, hold: bool = False) -> None:
        """One more reference on `e`, hold or dynamic (an association's INF stays INF)."""
        if hold:
            e.hold += 1
        elif e.dyn != INF:
            e.dyn += 1

    @staticmethod
    def unreference(e: HostDataToTarget, hold: bool = False, delete: bool = False) -> bool:
        """One reference fewer on `e`: a hold one, a dynamic one, or (delete) every dynamic
        one; never below 0, INF stays. Whether `e` holds no reference now."""
        if delete:
            if e.dyn != INF:
                e.dyn = 0
        elif hold:
            if e.hold > 0:
                e.hold -= 1
        elif 0 < e.dyn != INF:
            e.dyn -= 1
        return e.dyn + e.hold == 0

    @staticmethod
    def reference_forever(e: HostDataToTarget) -> None:
        """An association's count (INF): never unmapped by the mapping rules."""
        e.dyn = INF

    @staticmethod
    def mark(e: HostDataToTarget) -> None:
        """`e` in use once more (its device memory stays until unmarked)."""
        e.busy += 1

    def unmark(self, entries: Any) -> None:
        """Each of `entries` in use once less; threads waiting on idle are woken. A
        RuntimeError for an entry not marked (a mark given back twice)."""
        try:
            for e in entries:
                if e.busy <= 0:
                    raise RuntimeError(f"TableCore.unmark: {e!r} is not marked in use (a mark "
                                       f"given back twice)")
                e.busy -= 1
        finally:
            if self.waiting:
                self.idle.notify_all()
