"""Kernel arguments: the count check and the bytes of a scalar, for every plugin."""
from __future__ import annotations

import struct
from typing import Any

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
