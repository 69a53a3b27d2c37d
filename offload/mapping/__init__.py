"""The per-device mapping table (libomptarget's HostDataToTarget map) and the three
data operations, target_data_begin / target_data_end / target_data_update, with
LLVM's rules (docs/semantics.md, "Mapping"; LLVM's offload/test/mapping).

Begin is all or nothing. Within one construct (all the clauses of one call), the
clauses naming one array act as LLVM's do: the entry is created once, `to` copies
when this construct created it, `from` runs when this construct drops the last
reference whatever the clause order, and each copy happens once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _accel
from .._lazy import numpy as np
from .._lazy import numpy_imported
from ..clauses import _NOT_SINGLE_RANGE, MapClause, MapItem, MapType, map_items
from ..config import Info
from ..entries import INF, HostDataToTarget
from ..plugins.common import AllocKind, GenericPlugin
from ._base import _FROM, _TO, _held_lock
from .begin import Begin
from .end import End
from .steps import TableSteps, choose

__all__ = ["INF", "HostDataToTarget", "MapClause", "MapItem", "MapType", "MappingTable",
           "TableSteps", "map_items"]


class MappingTable(Begin, End):
    """Sorted, non-overlapping mappings of one device and the rules that change them."""

    def __init__(self, plugin: GenericPlugin, device: int, number: int, info: Info):
        super().__init__(plugin, device, number, info)
        #: the entry points of the common single-array steps: the compiled core's where
        #: it takes them, else this table's methods (chosen once, here)
        self.steps = choose(self, _accel.accelerate(
            self, self._core, self._dev, AllocKind.DEVICE, MappingTable.begin_single_range,
            MappingTable.end_single_range, MappingTable._release,
            MappingTable.update_single_range))
        #: MapClause.single_range for the constructs on this table (in C with the accelerator)
        #: (a C program's library, numpy not imported: its constructs make no MapClause)
        python = MapClause.single_range
        self.single_range_of: Callable[[MapClause], Any] = python if not numpy_imported() \
            else _accel.single_range_function(plugin.config, np.ndarray, _NOT_SINGLE_RANGE,
                                              python) or python

    # ---- one single-range clause (the common construct), in fewer steps ------------------------
    def begin_single_range(self, p: int, n: int, t: int, owner: Any, read_only: bool = False,
                    busy: list[HostDataToTarget] | None = None) -> int:
        """`target_data_begin([item], None, busy)[0]` for one clause mapping [p, p+n)
        (n > 0) whose type has no bits but TO and FROM, on a table without INFO: the same
        effects, in fewer steps when the range starts a ready mapping that holds it, or
        touches none; anything else goes through target_data_begin."""
        with self._lock:
            e = self._core.get(p)
            if e is not None:
                made = e.ready
                if p + n <= e.hst_end and (made is None or not made.locked()):
                    self._core.reference(e)             # present: a reference, no copy
                    if busy is not None:
                        self._core.mark(e)
                        busy.append(e)
                    return e.tgt_begin
                e = None
            elif self._core.find(p, n)[0] is None:           # nothing there: a new entry
                e = self._entry(p, n, 0, None, owner)
                self._core.reference(e)
                ready = e.ready = _held_lock()
                self._core.insert(e)
                if busy is not None:
                    self._core.mark(e)
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

    def end_single_range(self, p: int, n: int, t: int, owner: Any,
                  e: HostDataToTarget | None = None, copy_back: bool = True) -> None:
        """`target_data_end([item], None, copy_back, own)` for a clause as begin_single_range's,
        then `release_busy([e])` when `e` (the entry begin_single_range marked in use for the
        caller) is given: in fewer steps when the mapping starting at p holds the range,
        counts it dynamically and is in use by the caller alone; else through
        target_data_end."""
        own = 0 if e is None else 1
        with self._lock:
            f = self._core.get(p)
            fast = (f is not None and (e is None or f is e) and p + n <= f.hst_end
                    and f.busy == own and 1 <= f.dyn < INF
                    and (f.ready is None or not f.ready.locked()))   # not being made
            if fast:
                assert f is not None
                last = self._core.unreference(f)
                back = last and copy_back and t & _FROM
                if back:                   # kept, held, until copied back
                    self._leavers[id(f)] = 1
                    self._hold(f)
                elif last:
                    self._core.remove(f)
                if own:
                    self._core.unmark((f,))
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

    def update_single_range(self, p: int, n: int, t: int) -> None:
        """`target_data_update([item])` for one item over [p, p+n) (n > 0) of type TO or
        FROM, without INFO: copied now when present, skipped when absent."""
        self.target_data_update([MapItem(p, n, MapType(t), None)])

    def begin_general(self, p: int, n: int, t: int, owner: Any, read_only: bool = False,
                      busy: list[HostDataToTarget] | None = None) -> int:
        """begin_single_range's effect through target_data_begin (its path for anything else)."""
        return self.target_data_begin([MapItem(p, n, MapType(t), owner, None, read_only)],
                                      None, busy)[0]

    def end_general(self, p: int, n: int, t: int, owner: Any,
                    e: HostDataToTarget | None = None, copy_back: bool = True) -> None:
        """end_single_range's effect through target_data_end (its path for anything else)."""
        try:
            self.target_data_end([MapItem(p, n, MapType(t), owner)], None, copy_back,
                                 () if e is None else (e,))
        finally:
            if e is not None:
                self.release_busy([e])

