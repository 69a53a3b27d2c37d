"""Copies for the mapping rules (each naming its map clause to the profile), pointers
attached to device data (LLVM's shadow pointers), and target_data_update."""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from .. import profile
from ..clauses import MapItem, clause_text
from ..diagnostics import (
    error,
    present_missing,
)
from ..entries import HostDataToTarget
from ._base import _FROM, _HOLD, _I_EXISTS, _I_TRANSFER, _MEMBER, _PRESENT, _TO, TableState


class Motion(TableState):
    """Copies between host and device, attached pointers, and target update."""

    def _move(self, to_device: bool, p: int, tgt: int, n: int, queue: Any,
              clause: tuple) -> None:
        """One copy through the plugin, told to a tool, and to the profile with the map
        clause behind it (clause_text(*clause), written only while profiling)."""
        prof = profile.active
        if prof is not None:
            prof.clause(clause_text(*clause))
        try:
            if to_device:
                self.memory.submit(tgt, p, n, queue)
            else:
                self.memory.retrieve(p, tgt, n, queue)
        finally:
            if prof is not None:
                prof.clause(None)

    def _copy_to(self, p: int, tgt: int, n: int, name: str | None, queue: Any,
                 e: HostDataToTarget | None = None, t: int = _TO, motion: bool = False
                 ) -> None:
        if self.info & _I_TRANSFER:
            self._say(f"Copying data from host to device, HstPtr=0x{p:016x}, "
                      f"TgtPtr=0x{tgt:016x}, Size={n}, Name={name or 'unknown'}")
        self._move(True, p, tgt, n, queue, (t, name, motion))
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
        self._move(False, p, tgt, n, queue, (t, name, motion, True))
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
            e, inside = self._core.find(ptr, 8)
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
        self.memory.submit(tgt, src, 8)

    def _undo(self, it: MapItem, e: HostDataToTarget) -> None:
        """Take back the reference `it` took on `e` (no copies)."""
        t = int(it.type)
        if t & _MEMBER:
            return                                 # it took none
        with self._lock:
            gone = self._core.unreference(e, bool(t & _HOLD)) and id(e) not in self._leavers
            # (a leaver takes it out)
            if gone:
                self._core.remove(e)
        if gone:
            self._release(e)

    # ---- update -----------------------------------------------------------
    @staticmethod
    def skips_update(n: int, t: int) -> bool:
        """Whether target_data_update passes over an item of `n` bytes and map type `t`
        with nothing done: no byte to copy and no `present` to check."""
        return n <= 0 and not t & _PRESENT

    def target_data_update(self, items: Sequence[MapItem], queue: Any = None,
                           kept_busy: list[HostDataToTarget] | None = None) -> None:
        """Copy present items TO and/or FROM the device; absent ones are skipped. With
        `kept_busy`, the copies are only queued on `queue` and the entries they use stay
        marked in use, appended to `kept_busy` for `release_busy` once the queue has run
        (not OpenMP's hold: the ompx_hold count is the clauses' `hold=`)."""
        for it in items:
            if it.read_only and int(it.type) & _FROM:
                raise error([f"cannot update read-only memory at 0x{it.host:x} "
                             f"({it.size} bytes) from the device"], it,
                            "pass a writeable array")
        for it in items:
            p, n, t = it.host, it.size, int(it.type)
            if self.skips_update(n, t):
                continue
            e = self.acquire_busy(p, n) if n > 0 else None
            if e is None:
                # absent, or zero bytes to copy (held by a mapping by LLVM's zero-length
                # lookup, or not: the `present` check's only concern)
                if t & _PRESENT and (n > 0 or self.lookup(p, 0) is None):
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
                if queue is not None and kept_busy is None:
                    self.plugin.synchronize(self.device, queue)
            except BaseException:
                if kept_busy is not None:
                    self.plugin.synchronize(self.device, queue)
                raise
            finally:
                if kept_busy is None:
                    self.release_busy([e])
                else:
                    kept_busy.append(e)

