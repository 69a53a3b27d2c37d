"""target_data_end with LLVM's rules: `from` runs when this construct drops the last
reference whatever the clause order; the last unmap keeps its entry, held, until its
copy back is done (LLVM's map_back_race.cpp)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..clauses import MapItem
from ..diagnostics import (
    error,
    present_missing,
)
from ..entries import HostDataToTarget
from ..errors import OffloadError
from ._base import (
    _ALWAYS,
    _DELETE,
    _FROM,
    _HOLD,
    _I_CHANGED,
    _I_EXISTS,
    _IMPLICIT,
    _MEMBER,
    _PRESENT,
    _Construct,
    _held_lock,
    _mine,
    _pending,
)
from .motion import Motion


class End(Motion):
    """target_data_end: each unmap keeps its entry until its copy back is done."""

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
                    if self._core.waiting:
                        self._idle.notify_all()        # another unmapper's wait may be over
                    self._wait_idle(lambda: all(e.busy <= excused[id(e)] for e in dying))
            finally:
                for e in dying:
                    left = excused.pop(id(e)) - own.count(e) - 1
                    if left:
                        excused[id(e)] = left
                    self._core.unmark((e,))
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
                self._core.remove(e)
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
                    e = self._core.get(p)
                    if e is not None:
                        inside = p + n <= e.hst_end
                    else:
                        e, inside = self._core.find(p, n)
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
                        # a member's struct mapping counts for it
                        last = not t & _MEMBER and self._core.unreference(
                            e, bool(t & _HOLD), bool(t & _DELETE))
                        if self.info & _I_EXISTS:           # LLVM's words for what happened
                            how = (" (update suppressed)" if t & _MEMBER else " (decremented)"
                                   if not last else " (reset, delayed deletion)"
                                   if t & _DELETE else
                                   " (decremented, delayed deletion)")
                            self._say_exists(p, n, e, how, bool(t & _HOLD))
                        if last:                   # drained, held and taken out later;
                            self._core.mark(e)     # marked meanwhile, so that no fewer-steps
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

