"""Map clauses: LLVM's map-type bits, and clauses reduced to addresses at the API edge."""
from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from ._lazy import numpy as np
from .arrays import address_of, as_array, span
from .errors import ErrorCode, OffloadError


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
    #: offload's own bit, never in LLVM's: a struct member's clause (MEMBER_OF, not
    #: PTR_AND_OBJ) that finds its struct's mapping leaves the counts alone, as LLVM's
    #: data constructs do for such components
    MEMBER = 1 << 40


_KINDS = {0: "alloc", 1: "to", 2: "from", 3: "tofrom"}
_MODIFIERS = ((MapType.ALWAYS, "always"), (MapType.CLOSE, "close"),
              (MapType.PRESENT, "present"), (MapType.OMPX_HOLD, "ompx_hold"))


def clause_text(t: int, name: str | None, motion: bool = False, ending: bool = False) -> str:
    """The OpenMP clause behind map type bits `t` on `name`, as a user would write it:
    `map(always, tofrom: a)`, `update to(a)`, `map(delete: a)` (an exit's `alloc` is
    `release`)."""
    what = name or "unknown"
    if motion:
        return f"update {'to' if t & MapType.TO else 'from'}({what})"
    kind = "delete" if t & MapType.DELETE else _KINDS[t & 3]
    if ending and kind == "alloc":
        kind = "release"
    mods = "".join(f"{m}, " for bit, m in _MODIFIERS if t & bit)
    return f"map({mods}{kind}: {what})"


class MapItem:
    """One map clause, reduced to addresses at the API edge."""

    __slots__ = ("host", "size", "type", "owner", "name", "read_only", "base", "where")

    def __init__(self, host: int, size: int, type: MapType, owner: Any = None,
                 name: str | None = None, read_only: bool = False, base: int | None = None,
                 where: str | None = None):
        self.host = host
        self.size = size
        self.type = type
        self.owner = owner
        self.name = name
        self.read_only = read_only
        self.base = host if base is None else base      # HstPtrBase, for messages
        self.where = where            # where it was declared ('file:line:col'), if known

    def __repr__(self) -> str:
        return (f"MapItem(0x{self.host:x}+{self.size}, {self.type!r}, "
                f"{self.name or type(self.owner).__name__})")

    def subject(self) -> str:
        """What the clause maps, for messages: "array 'x' int32[100]"."""
        what = "array"
        if isinstance(self.owner, np.ndarray):
            what += f" {self.owner.dtype}[{', '.join(map(str, self.owner.shape))}]"
        if self.name:
            what = f"{what} '{self.name}'"
        return what


_NOT_SINGLE_RANGE = ~0x3                 # any bit but TO and FROM


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
        arr = self.array
        if type(arr) is np.ndarray:                     # the common case, checked quickly
            flags = arr.flags
            if flags.c_contiguous and not arr.dtype.hasobject:
                return MapItem(address_of(arr), arr.nbytes, self.type, arr, self.name,
                               not flags.writeable)
        arr = as_array(arr, "map")
        p, n = span(arr)
        return MapItem(p, n, self.type, arr, self.name, not arr.flags.writeable)

    def single_range(self) -> tuple[int, int, int, np.ndarray, bool] | None:
        """(address, size, type, array, read-only) when the clause has no bits but TO and
        FROM and maps a non-empty C-contiguous numpy array of a plain dtype (writeable if
        FROM): what MappingTable.begin_single_range/end_single_range take. None for anything
        else."""
        arr = self.array
        t = int(self.type)
        if type(arr) is not np.ndarray or t & _NOT_SINGLE_RANGE:
            return None
        flags = arr.flags
        n = arr.nbytes
        if not flags.c_contiguous or not n or arr.dtype.hasobject:
            return None
        read_only = not flags.writeable
        if read_only and t & 0x2:                 # FROM: the general path explains it
            return None
        return address_of(arr), n, t, arr, read_only

    def __repr__(self) -> str:
        return f"MapClause({self.type!r}, {self.name or type(self.array).__name__})"


def map_items(maps: Iterable[Any], default: MapType, what: str = "map") -> list[MapItem]:
    """MapItems from clauses, or from bare arrays mapped with `default`.

    `maps` must be a list or tuple: a bare array there would be iterated row by row."""
    if not isinstance(maps, (list, tuple)):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: expected a list of arrays or map clauses, got "
                           f"{type(maps).__name__}; write {what}=[a]")
    if len(maps) == 1:                             # the common case, without a listcomp
        m = maps[0]
        return [m.item() if isinstance(m, MapClause) else MapClause(m, default).item()]
    return [m.item() if isinstance(m, MapClause) else MapClause(m, default).item()
            for m in maps]


# ---- map clauses ------------------------------------------------------------------
_TOFROM = MapType.TO | MapType.FROM


def _clause(base: MapType, a: Any, always: bool, present: bool, close: bool, hold: bool,
            name: str | None) -> MapClause:
    if not (always or present or close or hold):
        return MapClause(a, base, name)
    t = base
    if always:
        t |= MapType.ALWAYS
    if present:
        t |= MapType.PRESENT
    if close:
        t |= MapType.CLOSE
    if hold:
        t |= MapType.OMPX_HOLD
    return MapClause(a, t, name)


def to(a: Any, *, always: bool = False, present: bool = False, close: bool = False,
       hold: bool = False, name: str | None = None) -> MapClause:
    """map(to: a): copied to the device when the mapping is created (or `always`).

    Args:
        a: a contiguous numpy array or buffer (a section such as `a[10:20]` works).
        always: copy even when the data is mapped already.
        present: fail unless the data is mapped already.
        close: a hint, accepted and ignored (as LLVM does on these devices).
        hold: count the reference in the ompx_hold count, which `delete` cannot drop.
        name: the name LIBOMPTARGET_INFO messages show.

    Returns:
        A MapClause for `map=`, `target_data`, `target_enter_data`, ...
    """
    return _clause(MapType.TO, a, always, present, close, hold, name)


def from_(a: Any, *, always: bool = False, present: bool = False, close: bool = False,
          hold: bool = False, name: str | None = None) -> MapClause:
    """map(from: a): copied back when the last reference goes (or `always`).

    Keywords as for `to`. A read-only array cannot be mapped `from`."""
    return _clause(MapType.FROM, a, always, present, close, hold, name)


def tofrom(a: Any, *, always: bool = False, present: bool = False, close: bool = False,
           hold: bool = False, name: str | None = None) -> MapClause:
    """map(tofrom: a): `to` on entry and `from` on exit; keywords as for `to`.

    Example:
        >>> with offload.target_data(offload.tofrom(a)): ...
    """
    return _clause(_TOFROM, a, always, present, close, hold, name)


def alloc(a: Any, *, always: bool = False, present: bool = False, close: bool = False,
          hold: bool = False, name: str | None = None) -> MapClause:
    """map(alloc: a): device memory without copies; keywords as for `to`."""
    return _clause(MapType.NONE, a, always, present, close, hold, name)


def release(a: Any, *, always: bool = False, present: bool = False, close: bool = False,
            hold: bool = False, name: str | None = None) -> MapClause:
    """map(release: a) for target_exit_data: drop one reference, copy nothing;
    keywords as for `to`."""
    return _clause(MapType.NONE, a, always, present, close, hold, name)


def delete(a: Any, *, always: bool = False, present: bool = False, close: bool = False,
           hold: bool = False, name: str | None = None) -> MapClause:
    """map(delete: a) for target_exit_data: drop every dynamic reference (the mapping
    goes unless a hold reference remains); keywords as for `to`."""
    return _clause(MapType.DELETE, a, always, present, close, hold, name)
