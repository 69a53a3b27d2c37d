"""The map arrays of LLVM 19's data and kernel entry points (bases, begins, sizes, types,
names, mappers) decoded into the mapping table's items, with LLVM's rules at this edge:
user-defined mappers expanded through their callbacks, MEMBER_OF members counted with
their struct, PTR_AND_OBJ pointers attached on the device (and restored on the host after
copies back), RETURN_PARAM device addresses written into the bases array, LITERAL and
zero-length pointers never mapped, NON_CONTIG updates copied row by row."""
from __future__ import annotations

import ctypes
import itertools
from typing import Any

from .. import locks
from .._lazy import numpy as np
from ..clauses import MapItem, MapType
from ..device import Device
from ..entries import INF
from ..errors import ErrorCode, OffloadError
from .abi import MEMBER_OF_MASK, NON_CONTIG
from .images import _T_UINTPTR, _cast, addr, ffi

_TO, _FROM, _DELETE = 0x1, 0x2, 0x8
_PTR_AND_OBJ, TARGET_PARAM, _RETURN_PARAM, _PRIVATE, _LITERAL = 0x10, 0x20, 0x40, 0x80, 0x100
_IMPLICIT = 0x200
_INFO_EXISTS = 0x2                         # LIBOMPTARGET_INFO: MAPPING_EXISTS
_MEMBER = int(MapType.MEMBER)
_POINTER, _POINTER_IMPLICIT = MapType.NONE, MapType.IMPLICIT    # an attached pointer's own map
_KEEP = 0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x1000 | 0x2000     # what the table acts on


class Arg:
    """One component of a map list; `tgt`: its device address once a region mapped it."""

    __slots__ = ("base", "begin", "size", "type", "name", "slot", "where", "tgt")

    def __init__(self, base: int, begin: int, size: int, type: int, name: str | None,
                 slot: int, where: str | None = None):
        self.base = base
        self.begin = begin
        self.size = size
        self.type = type
        self.name = name
        self.slot = slot          # its index in the caller's arrays (-1: from a mapper)
        self.where = where        # where the variable is declared, from -g names
        self.tgt: int | None = None

    def item(self) -> MapItem:
        t = self.type & _KEEP
        if self.type & MEMBER_OF_MASK and not self.type & _PTR_AND_OBJ:
            t |= _MEMBER
        mt = _MAP_TYPES.get(t)
        if mt is None:
            mt = _MAP_TYPES[t] = MapType(t)
        return MapItem(self.begin, self.size, mt, None, self.name, False,
                       None if self.type & _PTR_AND_OBJ else self.base, self.where)


_MAP_TYPES: dict[int, MapType] = {}          # the table's map types, made once per value


def _name(names: Any, i: int) -> tuple[str | None, str | None]:
    """(the variable's name, where it is declared: 'file:line:col') from the string clang
    passes with -g, ';name;file;line;col;;' (the file without its directories, as LLVM
    prints it); (None, None) without one."""
    if names == ffi.NULL or names[i] == ffi.NULL:
        return None, None
    raw = ffi.string(ffi.cast("char *", names[i])).decode(errors="replace")
    parts = raw.split(";")
    if len(parts) < 5:
        return (parts[1] if len(parts) > 2 else raw), None
    return parts[1], f"{parts[2].rsplit('/', 1)[-1] or 'unknown'}:{parts[3] or 0}:{parts[4] or 0}"


# ---- user-defined mappers: the generated function calls back with its components ------
_components: dict[int, list[Arg]] = {}
_handles = itertools.count(1)
_mapper_lock = locks.new_lock()


def num_components(handle: int) -> int:
    with _mapper_lock:
        return len(_components.get(handle, ()))


def push_component(handle: int, base: int, begin: int, size: int, type_: int,
                   name: Any) -> None:
    n, where = (None, None) if name == ffi.NULL else _name(ffi.new("void *[]", [name]), 0)
    with _mapper_lock:
        _components.setdefault(handle, []).append(Arg(base, begin, size, type_, n, -1, where))


def _expand(mapper: int, arg: Arg) -> list[Arg]:
    """The components a mapper function produces for one argument (LLVM's
    targetDataMapper): `mapper(handle, base, begin, size, type, name)`."""
    with _mapper_lock:
        handle = next(_handles)
        _components[handle] = []
    fn = ffi.cast("void (*)(uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t, uintptr_t)",
                  mapper)
    try:
        fn(handle, arg.base, arg.begin, arg.size, arg.type, 0)
        with _mapper_lock:
            return _components.pop(handle)
    finally:
        with _mapper_lock:
            _components.pop(handle, None)


def decode(n: int, bases: Any, begins: Any, sizes: Any, types: Any, names: Any = None,
           mappers: Any = None) -> tuple[list[Arg], list[Arg]]:
    """(what to map, the arguments as given): arguments with a mapper are replaced by
    the components it produces in the first list; kernels take the second."""
    out: list[Arg] = []
    given: list[Arg] = []
    names = ffi.NULL if names is None else names
    for i in range(n):
        name, where = _name(names, i)
        a = Arg(int(_cast(_T_UINTPTR, bases[i])), int(_cast(_T_UINTPTR, begins[i])),
                int(sizes[i]), int(types[i]) & (2**64 - 1), name, i, where)
        given.append(a)
        m = addr(mappers[i]) if mappers is not None and mappers != ffi.NULL else 0
        if m:
            comps = _expand(m, a)
            for c in comps:
                c.slot = -1
            out.extend(comps)
        else:
            out.append(a)
    return out, given


def _mapped(a: Arg) -> bool:
    """Whether the table takes this component (literals and privates are not; a
    zero-length one counts a reference on the mapping that holds its address, if any,
    as LLVM 19 does for use_device_ptr and zero-length sections)."""
    t = a.type
    return not (t & _LITERAL) and not (t & _PRIVATE)


# ---- LIBOMPTARGET_INFO's argument listing (KERNEL_ARGS), in LLVM 19's words -----------
REGIONS = {"begin": "Entering OpenMP data region with being_mapper",   # sic, as LLVM 19
           "end": "Exiting OpenMP data region with end_mapper",
           "update": "Updating data within the OpenMP data region with update_mapper",
           "begin_nowait": "Entering OpenMP data region with being_nowait_mapper",
           "end_nowait": "Exiting OpenMP data region with end_nowait_mapper",
           "update_nowait": "Updating data within the OpenMP data region with "
                            "update_nowait_mapper",
           "kernel": "Entering OpenMP kernel"}


def location(loc: Any) -> str:
    """'file:line:col' of an ident_t (its psource ';file;function;line;col;;')."""
    if loc is None or loc == ffi.NULL:
        return "unknown:0:0"
    ident = ffi.cast("ident_t *", loc)
    if ident.psource == ffi.NULL:
        return "unknown:0:0"
    parts = ffi.string(ident.psource).decode(errors="replace").split(";")
    if len(parts) < 5:
        return "unknown:0:0"
    name = parts[1].rsplit("/", 1)[-1] or "unknown"      # LLVM prints the file's name alone
    return f"{name}:{parts[3] or 0}:{parts[4] or 0}"


def _kind(t: int, size: int) -> str:
    """The map type's name as LLVM 19's argument listing gives it."""
    if t & _TO and t & _FROM:
        return "tofrom"
    if t & _TO:
        return "to"
    if t & _FROM:
        return "from"
    if t & _PRIVATE:
        return "private"
    if t & _LITERAL:
        return "firstprivate"
    if t & _RETURN_PARAM and size == 0:
        return "use_address"
    return "alloc"


def describe(region: str, loc: Any, given: list[Arg]) -> list[str]:
    """The lines LLVM 19 prints for a construct's arguments under LIBOMPTARGET_INFO=0x1."""
    out = [f"{REGIONS[region]} at {location(loc)} with {len(given)} arguments:"]
    for a in given:
        implicit = "(implicit)" if a.type & _IMPLICIT else ""
        out.append(f"{_kind(a.type, a.size)}({a.name or 'unknown'})[{a.size}] {implicit}")
    return out


# ---- begin / end / update --------------------------------------------------------------
def single_section(dev: Device, base: int, begin: int, size: int, type: int) -> bool:
    """Whether MappingTable.begin_single_range/end_single_range (update_single_range for a
    motion) take a construct's one component: a non-empty array section from its base,
    with no bits but TO, FROM and TARGET_PARAM, on a table not observed (the one rule of
    the drop-in's fewer-steps path)."""
    return _plain(dev, type) and size > 0 and base == begin


def empty_update(dev: Device, size: int, type: int) -> bool:
    """Whether a target update's one component is one the table passes over
    (MappingTable.skips_update: zero bytes, no `present`) with no bit but TO, FROM and
    TARGET_PARAM, on a table not observed: BabelStream's `update from(a[0:0])`."""
    return _plain(dev, type) and dev.table.skips_update(size, type)


def _plain(dev: Device, type: int) -> bool:
    """No bit but TO, FROM and TARGET_PARAM, on a table not observed (no INFO line or
    listener the fewer steps would leave out)."""
    return not (dev.table.observed or type & ~(_TO | _FROM | TARGET_PARAM))


def single_section_arg(dev: Device, args: list[Arg]) -> Arg | None:
    """The list's one component when single_section takes it; None for anything else."""
    if len(args) != 1:
        return None
    a = args[0]
    return a if single_section(dev, a.base, a.begin, a.size, a.type) else None


def begin(dev: Device, args: list[Arg], bases: Any = None,
          busy: list | None = None) -> list[MapItem]:
    """target_data_begin for the list (with `busy`, an empty list: its entries marked in
    use, see MappingTable.target_data_begin); each mapped component's device address in
    its `tgt`; PTR_AND_OBJ pointers attached right after their pointee is mapped, as
    LLVM 19 does; RETURN_PARAM device addresses written back into `bases`. Returns the
    items mapped, for `end`."""
    table = dev.table
    mapped = [a for a in args if _mapped(a)]
    items = [a.item() for a in mapped]
    attach = any(a.type & _PTR_AND_OBJ and a.size > 0 for a in mapped)
    held: list[Arg] = []

    def around(i: int, tgt: int | None) -> None:
        a = mapped[i]
        if a.type & _PTR_AND_OBJ and a.size > 0:
            if tgt is None:
                _pointer_found(dev, a, held)
            else:
                _attach(dev, a, tgt)
    try:
        tgts = table.target_data_begin(items, None, busy, around if attach else None)
    except BaseException:
        _release_pointers(dev, held)
        raise
    for a, tgt in zip(mapped, tgts, strict=True):
        a.tgt = tgt
    try:
        for a in args:
            if a.type & _RETURN_PARAM and bases is not None and a.slot >= 0:
                e = table.lookup(a.begin, a.size)      # zero-length: LLVM's base rule
                if e is not None:
                    tgt = e.tgt_begin + (a.begin - e.hst_begin)
                    bases[a.slot] = ffi.cast("void *", tgt - (a.begin - a.base))
    except BaseException:
        table.target_data_end(items, copy_back=False, own=busy or ())
        _release_pointers(dev, held)
        if busy:
            table.release_busy(busy)
            busy.clear()
        raise
    return items


def end(dev: Device, args: list[Arg], items: list[MapItem] | None = None,
        own: Any = (), copy_back: bool = True) -> None:
    """target_data_end for the list (`items`: what `begin` mapped, else made again; `own`:
    the caller's busy marks; no copy back with `copy_back=False`, after a failed launch);
    host pointers the copies back bring along keep their host values (the mapping's shadow
    pointers); the pointer mappings `begin` took are given back either way."""
    if items is None:
        items = [a.item() for a in args if _mapped(a)]
    try:
        dev.table.target_data_end(items, copy_back=copy_back, own=own)
    finally:
        _release_pointers(dev, [a for a in args if _mapped(a) and _holds_pointer(a)])


def update(dev: Device, args: list[Arg], n_dims: Any = None) -> None:
    """target_data_update; NON_CONTIG components copied as the rows they describe."""
    plain: list[Arg] = []
    strided: list[Arg] = []
    for a in args:
        (strided if a.type & NON_CONTIG else plain).append(a)
    dev.table.target_data_update([a.item() for a in plain if _mapped(a)])
    for a in strided:
        _update_non_contig(dev, a)


# ---- PTR_AND_OBJ: the device copy of a pointer points at the device copy of its target --
def _holds_pointer(a: Arg) -> bool:
    """Whether the construct maps the pointer of this PTR_AND_OBJ component itself: a
    pointer outside any struct (a struct's member pointer lives in the struct's mapping)."""
    return bool(a.type & _PTR_AND_OBJ) and a.size > 0 and not a.type & MEMBER_OF_MASK


def _pointer_found(dev: Device, a: Arg, held: list[Arg]) -> None:
    """Before its pointee, LLVM 19 maps the pointer itself: a pointer outside any struct
    gets a mapping of its 8 bytes (made, or counted once more; nothing copied), which the
    end of the construct gives back (LLVM 19 keeps it for good); a struct's member pointer
    is only looked up."""
    table = dev.table
    if _holds_pointer(a):
        table.target_data_begin([MapItem(a.base, 8, _POINTER_IMPLICIT if a.type & _IMPLICIT
                                         else _POINTER)])
        held.append(a)
    elif table.info & _INFO_EXISTS:
        table.say_pointer(a.base, bool(a.type & _IMPLICIT), True)


def _release_pointers(dev: Device, args: list[Arg]) -> None:
    """Give back the pointer mappings `_pointer_found` took (those of declare target
    variables are permanent: nothing to give back)."""
    table = dev.table
    for a in args:
        e = table.lookup(a.base, 8)
        if e is not None and e.dyn != INF:
            table.target_data_end([MapItem(a.base, 8, _POINTER)], copy_back=False)


def _attach(dev: Device, a: Arg, tgt: int) -> None:
    """Make the device copy of the pointer at `a.base` (when a mapping holds that pointer:
    a struct member, a declare target link) point at the device copy of its target, whose
    first mapped byte `a.begin` is at `tgt` on the device."""
    host_value = ctypes.c_uint64.from_address(a.base).value
    dev.table.attach(a.base, host_value, tgt - (a.begin - host_value))


def _write_pointer(dev: Device, where: int, value: int) -> None:
    """Store the 8-byte `value` at device address `where`."""
    buf = np.array([value], dtype=np.uint64)
    dev.submit(where, buf.ctypes.data, 8)


def _update_non_contig(dev: Device, a: Arg) -> None:
    """A NON_CONTIG motion: `a.begin` points at `a.size` dimension records (offset, count,
    stride in bytes), outermost first; copy each innermost run."""
    dims = ffi.cast("__tgt_target_non_contig *", a.begin)
    recs = [(int(dims[i].Offset), int(dims[i].Count), int(dims[i].Stride))
            for i in range(a.size)]
    if not recs:
        return
    *outer, (off, count, stride) = recs
    run = count * stride if stride else count          # the innermost run, in bytes
    starts = [a.base]
    for o, c, s in outer:
        starts = [p + (o + k) * s for p in starts for k in range(c)]
    to_device = bool(a.type & _TO)
    for p in starts:
        host = p + off * stride
        e = dev.table.acquire_busy(host, run)          # in use while it copies
        if e is None:
            continue
        tgt = e.tgt_begin + (host - e.hst_begin)
        try:
            if to_device:
                dev.submit(tgt, host, run)
            else:
                dev.retrieve(host, tgt, run)
        finally:
            dev.table.release_busy([e])


def _base(a: Arg) -> int:
    """The base address a kernel argument is offset from: of a PTR_AND_OBJ component,
    the value of its pointer (LLVM's processDataBefore)."""
    return a.base if not a.type & _PTR_AND_OBJ else ctypes.c_uint64.from_address(a.base).value


def kernel_args(dev: Device, args: list[Arg]) -> tuple[list[int], list[int]]:
    """The kernel's arguments (TARGET_PARAM components, in order): a literal's value, a
    mapped pointer's device address (TgtPtrBegin + (base - begin)), an unmapped
    zero-length pointer's host value; PRIVATE arrays get a device copy of their own.
    Returns (arguments, private allocations to free after the launch)."""
    out: list[int] = []
    private: list[int] = []
    copies: dict[int, int] = {}                # argument index -> its private device copy
    table = dev.table
    try:
        for i, a in enumerate(args):
            if not a.type & TARGET_PARAM or a.type & MEMBER_OF_MASK:
                continue
            if a.type & _LITERAL:
                out.append(a.base)
            elif a.type & _PRIVATE:
                p = dev.alloc(max(a.size, 1))
                private.append(p)
                copies[i] = p
                if a.size:
                    dev.submit(p, a.begin, a.size)
                out.append(p - (a.begin - a.base))
            elif a.tgt is not None and a.size:  # mapped by the region: its address
                if table.info & _INFO_EXISTS:
                    table.say_found(a.begin, a.size)
                out.append(a.tgt - (a.begin - _base(a)))
            else:
                if table.info & _INFO_EXISTS:
                    table.say_found(a.begin, a.size)
                e = table.lookup(a.begin, a.size)
                if e is None and a.size:       # partly mapped (a mapper's components):
                    e = table.overlapping(a.begin, a.size)   # LLVM takes what overlaps
                if e is None:
                    if a.size:
                        raise OffloadError(ErrorCode.NOT_FOUND,
                                           f"kernel argument at 0x{a.begin:x} ({a.size} bytes)"
                                           f" is not mapped")
                    out.append(a.base)              # an unmapped pointer: its host value
                    continue
                out.append(e.tgt_begin + (a.begin - e.hst_begin) - (a.begin - _base(a)))
        _lambda_captures(dev, args, copies)
    except BaseException:
        for p in private:
            dev.free(p)
        raise
    return out, private


def _lambda_captures(dev: Device, args: list[Arg], copies: dict[int, int]) -> None:
    """A lambda passed by value (a private copy) whose captures are references: each
    capture (MEMBER_OF the lambda, PTR_AND_OBJ | LITERAL) points, in the device copy, at
    the device copy of the variable it captured (LLVM's processDataBefore); a capture of
    something not mapped keeps its host address."""
    for a in args:
        t = a.type
        if not (t & MEMBER_OF_MASK and t & _PTR_AND_OBJ and t & _LITERAL):
            continue
        parent = (t >> 48) - 1
        copy = copies.get(parent)
        if copy is None:
            continue
        e = dev.table.lookup(a.begin, max(a.size, 1))
        if e is None:
            continue
        _write_pointer(dev, copy + (a.base - args[parent].begin),
                       e.tgt_begin + (a.begin - e.hst_begin))
