"""numpy and buffer objects turned into (address, size, owner), once, at the API edge."""
from __future__ import annotations

from typing import Any

import _cffi_backend

from ._lazy import numpy as np
from .dlpack import foreign_pointer, is_foreign
from .errors import ErrorCode, OffloadError


def address(x: Any) -> int:
    """An int address from an int, None (0) or any buffer-protocol object."""
    if x is None:
        return 0
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, np.ndarray):
        return int(x.__array_interface__["data"][0])
    try:
        return int(np.asarray(memoryview(x)).__array_interface__["data"][0])
    except (TypeError, ValueError):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"expected an address (int) or an array, got "
                           f"{type(x).__name__}") from None


def as_array(a: Any, what: str) -> np.ndarray:
    """`a` as a contiguous numpy array that shares its memory (never a copy)."""
    if isinstance(a, np.ndarray):
        arr = a
    else:
        try:
            arr = np.asarray(memoryview(a))
        except (TypeError, ValueError):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{what}: expected a numpy array or buffer, got "
                               f"{type(a).__name__}") from None
    if arr.dtype.hasobject:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: cannot map an array of dtype {arr.dtype} (it holds Python "
                           f"objects, whose pointers mean nothing on a device); use a numeric "
                           f"or plain structured dtype")
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: cannot map a non-contiguous array (shape {arr.shape}, "
                           f"strides {arr.strides}); pass a contiguous copy or section")
    return arr


_ffi = _cffi_backend.FFI()           # (built-in types only: no C parser needed)
# the backend's own functions with their types resolved once: a third cheaper than
# the FFI methods on the hot path
_b_from_buffer, _b_cast = _cffi_backend.from_buffer, _cffi_backend.cast
_CHARS, _UINTPTR = _ffi.typeof("char[]"), _ffi.typeof("uintptr_t")


def address_of(arr: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte."""
    return int(_b_cast(_UINTPTR, _b_from_buffer(_CHARS, arr, False)))


def span(arr: np.ndarray) -> tuple[int, int]:
    """(address of the first byte, size in bytes) of a contiguous array."""
    if arr.flags.c_contiguous:        # through cffi: a third of __array_interface__'s cost
        return address_of(arr), arr.nbytes
    return int(arr.__array_interface__["data"][0]), int(arr.nbytes)


def extent(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """(lowest, highest + 1) byte offsets a strided block touches, from its first element."""
    pairs = list(zip(shape, strides, strict=True))
    return (sum(min(0, (n - 1) * st) for n, st in pairs),
            sum(max(0, (n - 1) * st) for n, st in pairs) + itemsize)


def describe(arr: Any) -> str:
    """A short name for messages: 'float64[100]'."""
    if isinstance(arr, np.ndarray):
        return f"{arr.dtype}[{', '.join(map(str, arr.shape))}]"
    return type(arr).__name__


def integer(value: Any, what: str, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    """`value` as an int in [minimum, maximum]; INVALID_VALUE naming `what` otherwise
    (None, str, float, bool and 2**64 included)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what}: expected an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if not minimum <= v <= maximum:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what}: {v} is out of range [{minimum}, {maximum}]")
    return v


def buffer(x: Any, what: str, writable: bool = False) -> tuple[int, int | None]:
    """(address, size in bytes or None for a bare int address) of a pointer argument.

    Arrays must be contiguous and hold no Python objects; a destination must be
    writeable (not bytes, not a read-only array, not a foreign array its producer marked
    read-only). A foreign device array (CuPy, PyTorch:
    CUDA Array Interface or DLPack) gives its device pointer, once its producer's stream
    has finished the work queued on it."""
    if x is None:
        return 0, None
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        v = int(x)
        if not 0 <= v < 2**64:
            raise OffloadError(ErrorCode.INVALID_VALUE, f"{what}: address {v} out of range")
        return v, None
    found = foreign_pointer(x) if is_foreign(x) else None
    if found is not None:
        read_only, where = found.read_only, (found.address, found.nbytes)
    else:
        arr = as_array(x, what)
        read_only, where = not arr.flags.writeable, span(arr)
    if writable and read_only:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: the destination is read-only ({type(x).__name__}); "
                           f"pass a writeable array")
    return where
