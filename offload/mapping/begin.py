"""target_data_begin with LLVM's rules (docs/semantics.md, "Mapping"): all or nothing;
within one construct an entry is created once and `to` copies when this construct made it."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..clauses import MapItem, MapType
from ..diagnostics import (
    NULL_ILLEGAL,
    NULL_PRESENT,
    caller,
    error,
    explicit_extension,
    present_missing,
)
from ..entries import HostDataToTarget, count_text
from ..plugins.common import AllocKind
from ._base import (
    _ALWAYS,
    _FROM,
    _HOLD,
    _I_CHANGED,
    _I_EXISTS,
    _IMPLICIT,
    _MEMBER,
    _PRESENT,
    _TO,
    _Construct,
    _held_lock,
    _mine,
    _pending,
)
from .motion import Motion


class Begin(Motion):
    """target_data_begin: all clauses mapped, or none."""

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
                e, inside = self._core.find(it.host, it.size)
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
                e = self._core.get(p)
                if e is not None:
                    inside = p + n <= e.hst_end
                else:
                    e, inside = self._core.find(p, n)
                pending = None if e is None else _pending(e)
                if pending is not None:
                    pass                          # being made or unmade: wait, look again
                elif e is not None and (inside or t & _IMPLICIT):
                    if not t & _MEMBER:           # (its struct's mapping counts for it)
                        self._core.reference(e, bool(t & _HOLD))
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
                    e = self._entry(p, n, 0, it.name, it.owner)
                    e.hst_base = it.base
                    self._core.reference(e, bool(t & _HOLD))
                    e.ready = _held_lock()
                    _mine().add(id(e))
                    self._core.insert(e)
                    new = True
                    if t & _MEMBER:               # no struct mapping: it counts as its own
                        it.type = MapType(t & ~_MEMBER)
                if pending is None and busy is not None:
                    assert e is not None
                    self._core.mark(e)
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
        return self.memory.alloc(n, AllocKind.DEVICE, p)

    def _abandon(self, e: HostDataToTarget) -> None:
        """Take out a new entry whose making failed; those waiting for it see `failed`."""
        with self._lock:
            self._core.remove(e)
            e.failed = True
        try:
            self._release(e)
        finally:
            assert e.ready is not None
            _mine().discard(id(e))
            e.ready.release()

