"""A Python kernel's parameter types, from the call's arguments or a written signature,
and the C prototype offload launches it through (an array passes as its address and
then its extents)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._lazy import numpy as np
from ..errors import ErrorCode, OffloadError

#: the dtypes a kernel computes with (and may reduce), bool aside
NUMERIC = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float32", "float64")
_C_NAMES = {"int8": "signed char", "uint8": "unsigned char", "int16": "short",
            "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
            "int64": "long", "uint64": "unsigned long", "float32": "float",
            "float64": "double", "bool": "unsigned char"}


@dataclass(frozen=True)
class ParamType:
    """One parameter: an array (`ndim` >= 1, C-contiguous) or a scalar (`ndim` 0) of
    `dtype` (a numpy dtype name)."""

    dtype: str
    ndim: int

    def __str__(self) -> str:
        return self.dtype + (f"[{', '.join([':'] * self.ndim)}]" if self.ndim else "")

    @property
    def c_name(self) -> str:
        return _C_NAMES.get(self.dtype, "void")


def _dtype_name(dt: Any, where: str) -> str:
    d = np.dtype(dt)
    if d.kind not in "biuf" or d.byteorder == ">" or d.name not in _C_NAMES:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{where}: dtype {d} is not one a kernel takes (bool, integers, "
                           f"float32, float64 in native byte order)")
    return d.name


def of_argument(a: Any, i: int, kernel: str) -> ParamType:
    """The type argument `i` gives the kernel."""
    where = f"kernel '{kernel}': argument {i}"
    if isinstance(a, np.ndarray):
        if a.ndim == 0:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{where} is a 0-d array; pass a[()] (a scalar) or a[None]")
        if not a.flags.c_contiguous:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{where} is a {a.ndim}-d array that is not C-contiguous "
                               f"(strides {a.strides}); pass np.ascontiguousarray(a), or map "
                               f"the array it views and pass that")
        return ParamType(_dtype_name(a.dtype, where), a.ndim)
    if isinstance(a, bool | np.bool_):
        return ParamType("int64", 0)               # an integer in the kernel, as in C
    if isinstance(a, int):
        return ParamType("int64", 0)
    if isinstance(a, float):
        return ParamType("float64", 0)
    if isinstance(a, np.number):
        return ParamType(_dtype_name(a.dtype, where), 0)
    raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                       f"{where} is a {type(a).__name__}; a Python kernel takes numpy "
                       f"arrays, ints, floats and numpy scalars")


_WRITTEN = re.compile(r"^\s*(\w+)\s*(?:\[([\s:,]*)\])?\s*$")


def parse(written: Sequence[str] | str, kernel: str, count: int) -> tuple[ParamType, ...]:
    """A written signature, one type per parameter: 'float32[:, :]' for a 2-d array,
    'int64' for a scalar (a list, or one comma-separated string in parentheses)."""
    if isinstance(written, str):
        body = written.strip()
        if body.startswith("(") and body.endswith(")"):
            body = body[1:-1]
        items = [s for s in re.split(r",(?![^\[]*\])", body) if s.strip()]
    else:
        items = list(written)
    out = []
    for i, s in enumerate(items):
        m = _WRITTEN.match(str(s))
        if m is None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"kernel '{kernel}': signature item {i} {s!r}: expected a "
                               f"dtype, e.g. 'float32' or 'float32[:, :]'")
        dims = m.group(2)
        ndim = 0 if dims is None else dims.count(",") + 1
        try:
            name = _dtype_name(m.group(1), f"kernel '{kernel}': signature item {i}")
        except TypeError:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"kernel '{kernel}': signature item {i} {s!r}: "
                               f"{m.group(1)!r} is not a numpy dtype") from None
        out.append(ParamType(name, ndim))
    if len(out) != count:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{kernel}': the signature has {len(out)} type(s) for "
                           f"{count} parameter(s)")
    return tuple(out)


def check_against(written: tuple[ParamType, ...], args: Sequence[Any],
                  kernel: str) -> None:
    """INVALID_ARGUMENT naming the first argument that does not fit a written signature."""
    for i, (want, a) in enumerate(zip(written, args, strict=True)):
        got = of_argument(a, i, kernel)
        if got == want or (not want.ndim and not got.ndim and _scalar_fits(want, a)):
            continue
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{kernel}': argument {i} is {got}, but the signature "
                           f"says {want}; pass " + (
                               f"a.astype(np.{want.dtype})" if want.ndim else
                               f"np.{want.dtype}(x)") + " or change the signature")


def _scalar_fits(want: ParamType, a: Any) -> bool:
    """A Python number passes for any scalar parameter of its kind."""
    kind = np.dtype(want.dtype).kind
    if isinstance(a, bool | np.bool_):
        return kind in "biu"
    if isinstance(a, int):
        return kind in "iu"
    if isinstance(a, float):
        return kind == "f"
    return False


def expand(args: Sequence[Any]) -> list[Any]:
    """The launch's arguments: each array followed by its extents."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, np.ndarray):
            out.append(a)
            out.extend(int(s) for s in a.shape)
        elif isinstance(a, bool | np.bool_):
            out.append(int(a))
        else:
            out.append(a)
    return out


def launch_params(src_params: Sequence[str], reduced: Sequence[str],
                  dtypes: dict[str, str]) -> tuple[list[str], list[ParamType]]:
    """The launched function's parameter names (the kernel's, then one scratch array per
    reduced scalar) and the scratch arrays' types (`dtypes`: scalar -> dtype)."""
    return ([*src_params, *[f"__red_{r}" for r in reduced]],
            [ParamType(dtypes[r], 1) for r in reduced])


def prototype(name: str, types: Sequence[ParamType], params: Sequence[str]) -> str:
    """The C declaration of the launched function."""
    parts = []
    for t, p in zip(types, params, strict=True):
        if t.ndim:
            parts.append(f"{t.c_name} *{p}")
            parts += [f"long {p}_extent{d}" for d in range(t.ndim)]
        else:
            parts.append(f"{t.c_name} {p}")
    return f"void {name}({', '.join(parts) or 'void'});"
