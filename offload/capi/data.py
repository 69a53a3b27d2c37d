"""The drop-in's data constructs (__tgt_target_data_begin / end / update and their
nowait and mapper forms): one array section goes to the table's fewer-steps
methods with its fields read in C (data_one); any other list is decoded and goes
through the mapping rules, with LLVM 19's INFO lines, OMPT callbacks and table dumps."""
from __future__ import annotations

from typing import Any

from ..diagnostics import say
from ..errors import OffloadError
from . import hot_regions, maps, ompt
from .abi import DATA_EXPORTS
from .devices import (
    construct_failed,
)
from .kernels import (
    construct_device,
    dump_tables,
)


def _data(kind: str, dev: int, n: int, bases: Any, begins: Any, sizes: Any, types: Any,
          names: Any = None, mappers: Any = None, loc: Any = None,
          nowait: bool = False) -> None:
    d = construct_device(dev)
    if d is None:
        return
    args, given = maps.decode(n, bases, begins, sizes, types, names, mappers)
    if d.table.info & 0x1:                       # LIBOMPTARGET_INFO: KERNEL_ARGS
        for line in maps.describe(kind + "_nowait" if nowait else kind, loc, given):
            say(d.number, line)
    if ompt.listening:
        with ompt.region(_REGION_KINDS[kind], d.number):
            _apply(kind, d, args, bases, loc)
    else:
        _apply(kind, d, args, bases, loc)
    dump_tables(d, loc)


def data_one(loc: Any, export: int, dev: int, base: int, begin: int, size: int, type: int
             ) -> int:
    """A data construct (DATA_EXPORTS[export]) of one component without a mapper, as the
    library's C body read it: 1 when done here (in fewer steps, maps.single_section; an
    update that moves nothing, maps.empty_update), 0 for the general path (_data), which
    gets the construct's own arguments."""
    d = construct_device(dev)
    if d is None:
        return 1
    one = (base, begin, size, type)
    if ompt.listening:
        return 0
    kind = DATA_EXPORTS[export][1]
    if not maps.single_section(d, *one):
        return 1 if kind == "update" and maps.empty_update(d, size, type) else 0
    if not _run_single_section(kind, d, one, loc):
        return 0
    if hot_regions.in_core(dev):             # the library's C runs the next ones
        hot_regions.keep_data(dev, d)
    return 1


def kept_failed(loc: Any, export: int, exc: BaseException) -> None:
    """A data construct (DATA_EXPORTS[export]) the compiled core ran as kept
    (hot_regions.keep_data) whose step raised `exc`: reported as data_one reports it."""
    if isinstance(exc, OffloadError):
        construct_failed(loc, exc)
        return
    raise exc


_REGION_KINDS = {"begin": ompt.ENTER_DATA, "end": ompt.EXIT_DATA, "update": ompt.UPDATE}


def _run_single_section(kind: str, d: Any, one: tuple[int, int, int, int], loc: Any = None) -> bool:
    """Run the construct on its single section (maps.single_section) in fewer steps;
    False when it is a motion both ways (the general path)."""
    _, begin, size, t = one
    t &= 0x3
    if kind == "update" and t not in (1, 2):
        return False
    try:
        if kind == "begin":
            d.table.steps.begin_single_range(begin, size, t, None)
        elif kind == "end":
            d.table.steps.end_single_range(begin, size, t, None)
        else:
            d.table.steps.update_single_range(begin, size, t)
    except OffloadError as exc:
        construct_failed(loc, exc)
    return True


def _apply(kind: str, d: Any, args: list[maps.Arg], bases: Any, loc: Any) -> None:
    one = maps.single_section_arg(d, args)
    if one is not None and _run_single_section(kind, d, (one.base, one.begin, one.size,
                                                         one.type), loc):
        return
    try:
        if kind == "begin":
            maps.begin(d, args, bases)
        elif kind == "end":
            maps.end(d, args)
        else:
            maps.update(d, args)
    except OffloadError as exc:
        construct_failed(loc, exc)
