"""The OpenMP-named API's C conventions, shared by omp.py, omp_copies.py and omp_async.py:
its status values, a failure reported as one `omptarget error:` line, NULL arguments and
integer lists."""
from __future__ import annotations

import sys
from typing import Any

from ._lazy import numpy as np
from .arrays import integer
from .device import Device
from .errors import ErrorCode, OffloadError
from .runtime import current as _current

OFFLOAD_SUCCESS = 0
"""What a status-returning OpenMP-named function returns when it did its job."""
OFFLOAD_FAIL = -1
"""What it returns when it failed (after one `omptarget error:` line)."""
INT_MAX = 2**31 - 1


def _device(n: Any) -> Device | None:
    return _current().device(n)


def _fail(exc: OffloadError, value: Any) -> Any:
    print(f"omptarget error: {exc.message}", file=sys.stderr)
    return value


def _null(x: Any) -> bool:
    """None or the integer 0 (a NULL pointer argument)."""
    return x is None or (isinstance(x, (int, np.integer)) and x == 0)


def _int_list(seq: Any, what: str, count: int, minimum: int = 0) -> list[int]:
    try:
        items = list(seq)
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what}: expected a sequence of integers, got "
                           f"{type(seq).__name__}") from None
    if len(items) < count:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what} has {len(items)} entries, num_dims is {count}")
    return [integer(v, f"{what}[{i}]", minimum) for i, v in enumerate(items[:count])]


def _within(limit: int | None, offset: int, length: int, what: str) -> None:
    if limit is not None and offset + length > limit:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what}: bytes [{offset}, {offset + length}) lie past the end of "
                           f"its {limit}-byte buffer")
