"""Kernel arguments: the count check and the bytes of a scalar, for every plugin."""
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._lazy import numpy as np
from ..errors import ErrorCode, OffloadError


def check_kernel_args(name: str, expected: int, given: int, signature: str) -> None:
    """The one error for a kernel called with the wrong number of arguments."""
    if expected != given:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{name}' takes {expected} argument(s) ({signature}), "
                           f"{given} given")


def pack_scalar(value: Any, size: int, what: str) -> bytes:
    """A kernel argument's bytes: a device address or integer, a float, or raw bytes of
    the parameter's size (little-endian, as on every device we drive)."""
    fmt = None
    if isinstance(value, float):
        fmt = {4: "<f", 8: "<d"}.get(size)
    elif isinstance(value, (int, bool)):
        fmt = {1: "<B", 2: "<h", 4: "<i", 8: "<q"}.get(size)
        if fmt is not None and size in (4, 8) and value >= 1 << (8 * size - 1):
            fmt = fmt.upper()                       # an unsigned value (an address)
    elif isinstance(value, (bytes, bytearray)) and len(value) == size:
        return bytes(value)
    if fmt is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: cannot pass {type(value).__name__} as {size} bytes"
                           f"{'; pass bytes for aggregates' if size not in (1, 2, 4, 8) else ''}")
    try:
        return struct.pack(fmt, value)
    except struct.error as exc:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: {value!r} does not fit in {size} bytes ({exc})") from None


# ---- parameter types -----------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """A kernel parameter as far as argument checking needs it.

    `pointer`: the parameter is an address. `kind`: for a pointer, what it points to,
    for a scalar, what it is: 'i' signed integer, 'u' unsigned, 'f' floating point,
    'b' bool, 'char' (either signedness), 'void' (anything), 'struct'; None when
    unknown (not checked). `size`: bytes of the scalar or of the pointee (0: unknown).
    """

    decl: str
    pointer: bool
    kind: str | None = None
    size: int = 0


_FLOATS = {"float", "double", "long double", "_Float16", "__half", "half"}
_UNSIGNED_NAMES = {"size_t", "uintptr_t", "wchar_t", "char16_t", "char32_t"}


def scalar_kind(cname: str) -> str:
    """'i', 'u', 'f', 'b' or 'char' for a C scalar type's name."""
    name = cname.replace("const ", "").replace("volatile ", "").strip()
    if name in _FLOATS:
        return "f"
    if name in ("_Bool", "bool"):
        return "b"
    if name == "char":
        return "char"
    if name.startswith(("unsigned", "uint")) or name in _UNSIGNED_NAMES:
        return "u"
    return "i"


def params_from_ctype(ffi: Any, fn_type: Any) -> list[Param]:
    """Params from a cffi function type (host kernels, and prototypes of GPU kernels)."""
    out = []
    for t in fn_type.args:
        decl = t.cname
        if t.kind == "pointer":
            item = t.item
            if item.kind == "void":
                out.append(Param(decl, True, "void"))
            elif item.kind == "primitive":
                out.append(Param(decl, True, scalar_kind(item.cname), ffi.sizeof(item)))
            elif item.kind == "struct":
                out.append(Param(decl, True, "struct", ffi.sizeof(item)))
            else:
                out.append(Param(decl, True, None))
        elif t.kind == "primitive":
            out.append(Param(decl, False, scalar_kind(t.cname), ffi.sizeof(t)))
        elif t.kind == "enum":
            out.append(Param(decl, False, "i", ffi.sizeof(t)))
        else:
            out.append(Param(decl, False, None, ffi.sizeof(t) if t.kind == "struct" else 0))
    return out


def params_from_prototype(decl: str, name: str) -> list[Param] | None:
    """Params of function `name` from a C declaration; None when cffi cannot parse it."""
    import re

    import cffi
    typedef, count = re.subn(rf"\b{re.escape(name)}\s*\(", "(*offload_fn_t)(", decl, count=1)
    if not count:
        return None
    ffi = cffi.FFI()
    try:
        ffi.cdef("typedef " + typedef.replace("extern ", ""))
        return params_from_ctype(ffi, ffi.typeof("offload_fn_t"))
    except Exception:              # noqa: BLE001 - CUDA-only types, templates: unchecked
        return None


def _dtype_fits(p: Param, dtype: np.dtype) -> bool:
    kind, size = p.kind, p.size
    if kind in (None, "void"):
        return True
    if kind == "struct":
        return dtype.itemsize == size
    if dtype.itemsize != size and size:
        return False
    if kind == "char":
        return dtype.kind in "iub"
    return dtype.kind == kind


def _numpy_name(p: Param) -> str:
    names = {("f", 2): "float16", ("f", 4): "float32", ("f", 8): "float64",
             ("i", 1): "int8", ("i", 2): "int16", ("i", 4): "int32", ("i", 8): "int64",
             ("u", 1): "uint8", ("u", 2): "uint16", ("u", 4): "uint32", ("u", 8): "uint64",
             ("char", 1): "int8 or uint8", ("b", 1): "bool"}
    found = names.get((p.kind or "", p.size))
    if found:
        return found
    return f"a dtype of {p.size} bytes" if p.size else "any dtype"


def check_arguments(kernel: str, params: Sequence[Param], args: Sequence[Any]) -> None:
    """Refuse arguments that do not fit the kernel's parameters, before anything is
    mapped: an array whose dtype is not the pointee type, an array or float for an
    integer, a float for a pointer, an int for a floating-point parameter (sent as its
    integer bits it would arrive as nonsense). An int for a pointer is a device address."""
    if len(params) != len(args):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{kernel}' takes {len(params)} argument(s) "
                           f"({', '.join(p.decl for p in params)}), {len(args)} given")
    for i, (p, a) in enumerate(zip(params, args, strict=True)):
        problem = _misfit(p, a)
        if problem:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"kernel '{kernel}', parameter {i} ({p.decl}): {problem}")


def _out_of_range(p: Param, a: int) -> str | None:
    """Why integer `a` cannot be passed as `p` (a C char takes -128 to 255, as C converts
    either signedness), None when it can."""
    if p.pointer:
        lo, hi = 0, 2**64 - 1
    elif p.kind == "char":
        lo, hi = -128, 255
    elif p.kind in ("i", "u") and p.size:
        bits = 8 * p.size
        lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if p.kind == "i" else (0, (1 << bits) - 1)
    else:
        return None
    if lo <= a <= hi:
        return None
    what = "a device address" if p.pointer else "an integer"
    return f"expected {what} in [{lo}, {hi}], got {a}"


def _shape(a: np.ndarray) -> str:
    return f"{a.dtype}[{', '.join(map(str, a.shape))}]"


def _misfit(p: Param, a: Any) -> str | None:
    """Why `a` does not fit `p` (None when it does); messages made only on failure."""
    t = type(a)
    if t is int:
        if not p.pointer and p.kind == "f":
            return f"expected a float, got int {a!r}; write {a!r}.0"
        return _out_of_range(p, a)         # integers and device addresses
    if t is np.ndarray:
        if not p.pointer:
            return f"expected a scalar, got an array {_shape(a)}"
        if not _dtype_fits(p, a.dtype):
            return (f"expected an array of {_numpy_name(p)}, got {_shape(a)}; convert it "
                    f"(a.astype(...)) or fix the kernel's parameter type")
        if not a.flags.c_contiguous:       # its elements would arrive in another order
            order = "a Fortran-ordered" if a.flags.f_contiguous else "a non-contiguous"
            return (f"expected a C-ordered (row-major) contiguous array, got {order} "
                    f"{_shape(a)}: the kernel would read its elements in another order; "
                    f"pass np.ascontiguousarray(a)")
        return None
    if isinstance(a, (bool, np.bool_)):
        return "expected an array or a device address, got bool" if p.pointer else None
    if isinstance(a, (int, np.integer)):
        if not p.pointer and p.kind == "f":
            return f"expected a float, got int {a!r}; write float({a!r})"
        return _out_of_range(p, int(a))
    if isinstance(a, (float, np.floating)):
        if p.pointer:
            return f"expected an array or a device address (int), got float {a!r}"
        if p.kind in ("i", "u", "b", "char"):
            return f"expected an integer, got float {a!r}"
        return None
    if isinstance(a, np.ndarray):          # a subclass
        return _misfit(p, np.asarray(a))
    if isinstance(a, (bytes, bytearray)) and not p.pointer:
        if p.size and len(a) != p.size:
            return f"expected {p.size} bytes, got {len(a)}"
        return None
    return (f"cannot pass {type(a).__name__} "
            f"({'an array or a device address' if p.pointer else 'a number'} expected)")


@dataclass
class GenericKernel:
    """A kernel found in a loaded binary: the vendor's handle and its parameters."""

    name: str
    handle: Any
    #: one entry per explicit parameter, in the vendor's terms (sizes, C types, metadata)
    params: list = field(default_factory=list)
    #: the parameter list for messages, e.g. "int *a, long n"
    signature: str = ""
    #: parameter types for checking arguments (None: only their number is checked)
    types: list[Param] | None = None
    #: argument kinds (`argument_kinds`) already found to fit `types`
    accepted: set = field(default_factory=set)
    #: the plugin's own per-kernel launch state (reusable argument buffers), made lazily
    launch_state: Any = None
    #: the plugin's launch specs for the accelerator, by geometry (accel_launch)
    fast_launch: dict = field(default_factory=dict)
    #: a kernel launched as several in a row: ((kernel, geometry), ...), geometry
    #: (teams, threads) fixed for that one, else None (Binary.phases)
    phases: tuple = ()


_KINDS_KEPT = 64          # accepted argument kinds remembered per kernel


def argument_kinds(args: Sequence[Any]) -> tuple | None:
    """What `check_arguments` judges of `args`: each one's dtype (a plain array) or type
    (a number); None when an argument is judged by more (bytes, subclasses, objects)."""
    if len(args) == 1 and type(args[0]) is np.ndarray:     # the common region: one array
        a = args[0]
        return (a.dtype if a.flags.c_contiguous else (a.dtype, a.strides),)
    kinds = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            kinds.append(a.dtype if a.flags.c_contiguous else (a.dtype, a.strides))
        elif t is int or t is float or t is bool or isinstance(a, (np.number, np.bool_)):
            kinds.append(t)
        else:
            return None
    return tuple(kinds)


def check_kernel_call(k: GenericKernel, args: Sequence[Any]) -> None:
    """`check_arguments` against `k`'s parameter types (their number alone where its
    types are unknown), skipped for argument kinds it accepted before."""
    types = k.types
    if types is None or len(types) != len(k.params):
        check_kernel_args(k.name, len(k.params), len(args), k.signature)
        return
    kinds = argument_kinds(args)
    if kinds is not None and kinds in k.accepted:
        return
    check_arguments(k.name, types, args)
    if kinds is not None and len(k.accepted) < _KINDS_KEPT:
        k.accepted.add(kinds)


_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}


def slotted(sizes: Sequence[int]) -> bool:
    """Whether every parameter of these byte sizes packs unsigned into an 8-byte slot."""
    return all(sz in _UNSIGNED for sz in sizes)


class ArgSlots:
    """One kernel's parameter memory, reused: each parameter in an 8-byte slot of one
    buffer (`ffi`'s memory), and the pointer array a driver's launch takes (CUDA's
    kernelParams; the driver copies the values during the call, so a buffer is free
    again when it returns). `free` is a list: its
    pop and append are atomic, so threads share it without a lock."""

    def __init__(self, sizes: Sequence[int], ffi: Any):
        self._ffi = ffi
        self.count = len(sizes)
        slots = bool(sizes) and slotted(sizes)
        self.struct = struct.Struct("<" + "".join(
            _UNSIGNED[sz] + (f"{8 - sz}x" if sz < 8 else "") for sz in sizes)) if slots else None
        self.free: list[tuple[Any, Any, Any]] = []

    def fill(self, args: Sequence[Any]) -> tuple[Any, Any, Any] | None:
        """A free buffer holding `args` (take it back with `free.append` once the driver
        has copied it) when every argument is an int that fits its parameter unsigned;
        None otherwise (the general packing then handles it, or explains)."""
        if self.struct is None or len(args) != self.count:
            return None
        for a in args:
            if type(a) is not int:
                return None
        try:
            held = self.free.pop()
        except IndexError:
            held = self.make()
        try:
            self.struct.pack_into(held[2], 0, *args)
        except struct.error:                   # negative, or too large: the general path
            self.free.append(held)
            return None
        return held

    def make(self) -> tuple[Any, Any, Any]:
        """(slots, the pointer array naming them, the slots as a writable buffer)."""
        ffi = self._ffi
        buf = ffi.new("uint64_t[]", self.count)
        return buf, ffi.new("void *[]", [buf + i for i in range(self.count)]), ffi.buffer(buf)
