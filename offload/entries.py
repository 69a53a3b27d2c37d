"""One mapping of the table: libomptarget's HostDataToTarget."""
from __future__ import annotations

import math
import threading
from typing import Any

INF = math.inf


class HostDataToTarget:
    """One mapping: host range -> device range, with dynamic and hold counts."""

    __slots__ = ("hst_begin", "hst_end", "hst_base", "tgt_begin", "dyn", "hold", "owner", "name",
                 "pinned", "owned", "ready", "failed", "where", "busy", "views", "shadows")

    def __init__(self, hst: int, size: int, tgt: int, name: str | None, owner: Any,
                 owned: bool = True):
        self.hst_begin = hst
        self.hst_end = hst + size
        self.hst_base = hst              # HstPtrBase: the array a section was taken from
        self.tgt_begin = tgt
        self.dyn: float = 0
        self.hold: float = 0
        self.owner = owner
        self.name = name
        self.pinned = False
        self.owned = owned
        self.ready: threading.Lock | None = None    # held until allocated and filled
        self.failed = False
        self.where = "unknown:0:0"                  # where it was mapped (table dumps)
        self.busy = 0                               # operations in flight using it
        self.views: dict | None = None              # device_array layouts, made once
        # pointers inside it attached to device data (PTR_AND_OBJ): host address of the
        # pointer -> (its host value, its device value); kept across copies both ways
        self.shadows: dict[int, tuple[int, int]] | None = None

    @property
    def size(self) -> int:
        return self.hst_end - self.hst_begin

    def total(self) -> float:
        return self.dyn + self.hold

    def __repr__(self) -> str:
        return (f"HostDataToTarget(0x{self.hst_begin:x}+{self.size} -> 0x{self.tgt_begin:x}, "
                f"dyn={self.dyn}, hold={self.hold})")


def count_text(v: float) -> str:
    """A reference count as LLVM prints it ('INF' for an association)."""
    return "INF" if v == INF else str(int(v))
