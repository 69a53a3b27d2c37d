"""omp_target_memcpy and omp_target_memcpy_rect (OpenMP 5.2 §18.8): the checks of their
arguments (plans, shared with the asynchronous forms in omp_async.py) and the copies."""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from ._lazy import numpy as np
from .arrays import buffer, integer
from .device import Device
from .dlpack import is_foreign
from .errors import ErrorCode, OffloadError
from .omp_common import (
    INT_MAX,
    OFFLOAD_FAIL,
    OFFLOAD_SUCCESS,
    _device,
    _fail,
    _int_list,
    _null,
    _within,
)
from .plugins.common import memmove
from .runtime import operation


def _copy(dst: int, src: int, n: int, ddev: Device | None, sdev: Device | None) -> None:
    if ddev is None and sdev is None:
        memmove(dst, src, n)
    elif sdev is None:
        assert ddev is not None
        ddev.submit(dst, src, n)
    elif ddev is None:
        sdev.retrieve(dst, src, n)
    elif not sdev.exchange(src, ddev, dst, n):
        buf = np.empty(n, dtype=np.uint8)
        sdev.retrieve(buf.ctypes.data, src, n)
        ddev.submit(dst, buf.ctypes.data, n)


def _device_array_on_device(x: Any, dev: Device | None, what: str) -> None:
    """A foreign device array (CuPy, PyTorch) must be named with its GPU's device number."""
    if dev is None and is_foreign(x):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what} is a device array ({type(x).__name__}) but its device "
                           f"number names the initial device; pass the number of the device "
                           f"that holds it")


@operation
def omp_target_memcpy(dst: Any, src: Any, length: int, dst_offset: int, src_offset: int,
                      dst_device_num: int, src_device_num: int) -> int:
    """Copy `length` bytes between any two devices (the initial device included).

    Args:
        dst: an address (int) or a contiguous array, checked to hold the bytes copied
            and to be writeable.
        src: an address (int) or a contiguous array, checked to hold the bytes copied.
        length: bytes to copy.
        dst_offset: byte offset added to dst.
        src_offset: byte offset added to src.
        dst_device_num: dst's device number (omp_get_initial_device() for the host).
        src_device_num: src's device number.

    Returns:
        0, or -1 after one error line (bad sizes or offsets, NULL, out of bounds,
        driver errors).

    Example:
        >>> omp_target_memcpy(d, a, a.nbytes, 0, 0, 0, omp_get_initial_device())
        0
    """
    try:
        plan = _memcpy_plan("omp_target_memcpy", dst, src, length, dst_offset, src_offset,
                            dst_device_num, src_device_num)
        if plan is not None:
            plan()
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def _memcpy_plan(what: str, dst: Any, src: Any, length: Any, dst_offset: Any,
                 src_offset: Any, dst_device_num: Any,
                 src_device_num: Any) -> Callable[[], None] | None:
    """Check a memcpy's arguments; the copy to run (None when there is nothing to copy)."""
    ddev, sdev = _device(dst_device_num), _device(src_device_num)
    n = integer(length, f"{what}: length")
    doff = integer(dst_offset, f"{what}: dst_offset")
    soff = integer(src_offset, f"{what}: src_offset")
    d, dlim = buffer(dst, f"{what}: dst", writable=True)
    s, slim = buffer(src, f"{what}: src")
    _device_array_on_device(dst, ddev, f"{what}: dst")
    _device_array_on_device(src, sdev, f"{what}: src")
    if n == 0:
        return None
    if d == 0 or s == 0:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: NULL {'dst' if d == 0 else 'src'} pointer")
    _within(dlim, doff, n, f"{what}: dst")
    _within(slim, soff, n, f"{what}: src")
    if ddev is not None:
        ddev.check_range(d + doff, n, f"{what}: dst")
    if sdev is not None:
        sdev.check_range(s + soff, n, f"{what}: src")
    return functools.partial(_copy, d + doff, s + soff, n, ddev, sdev)


@operation
def omp_target_memcpy_rect(dst: Any, src: Any, element_size: int, num_dims: int,
                           volume: Sequence[int], dst_offsets: Sequence[int],
                           src_offsets: Sequence[int], dst_dimensions: Sequence[int],
                           src_dimensions: Sequence[int], dst_device_num: int,
                           src_device_num: int) -> int:
    """Copy a `num_dims`-dimensional sub-block of `volume` elements.

    Each offset plus volume must fit inside its dimension, and an array argument must
    hold its whole dimensions. Returns INT_MAX when both pointers are NULL (the number
    of dimensions supported), else 0, or -1 after one error line."""
    if _null(dst) and _null(src):
        return INT_MAX
    try:
        plan = _rect_plan("omp_target_memcpy_rect", dst, src, element_size, num_dims, volume,
                          dst_offsets, src_offsets, dst_dimensions, src_dimensions,
                          dst_device_num, src_device_num)
        if plan is not None:
            plan()
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def _rect_plan(what: str, dst: Any, src: Any, element_size: Any, num_dims: Any, volume: Any,
               dst_offsets: Any, src_offsets: Any, dst_dimensions: Any, src_dimensions: Any,
               dst_device_num: Any, src_device_num: Any) -> Callable[[], None] | None:
    """Check a rectangular copy's arguments; the copy to run (None for an empty one)."""
    ddev, sdev = _device(dst_device_num), _device(src_device_num)
    es = integer(element_size, f"{what}: element_size", minimum=1)
    nd = integer(num_dims, f"{what}: num_dims", minimum=1, maximum=1 << 16)
    vol = _int_list(volume, f"{what}: volume", nd)
    doff = _int_list(dst_offsets, f"{what}: dst_offsets", nd)
    soff = _int_list(src_offsets, f"{what}: src_offsets", nd)
    ddim = _int_list(dst_dimensions, f"{what}: dst_dimensions", nd)
    sdim = _int_list(src_dimensions, f"{what}: src_dimensions", nd)
    d, dlim = buffer(dst, f"{what}: dst", writable=True)
    s, slim = buffer(src, f"{what}: src")
    _device_array_on_device(dst, ddev, f"{what}: dst")
    _device_array_on_device(src, sdev, f"{what}: src")
    if d == 0 or s == 0:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: NULL {'dst' if d == 0 else 'src'} pointer")
    for i in range(nd):
        for side, off, dim in (("dst", doff, ddim), ("src", soff, sdim)):
            if off[i] + vol[i] > dim[i]:
                raise OffloadError(ErrorCode.INVALID_VALUE,
                                   f"{what}: {side} dimension {i}: offset {off[i]} + "
                                   f"volume {vol[i]} exceeds the dimension {dim[i]}")
    _within(dlim, 0, es * math.prod(ddim), f"{what}: dst")
    _within(slim, 0, es * math.prod(sdim), f"{what}: src")
    if ddev is not None:
        ddev.check_range(d, es * math.prod(ddim), f"{what}: dst")
    if sdev is not None:
        sdev.check_range(s, es * math.prod(sdim), f"{what}: src")
    if 0 in vol:
        return None
    return functools.partial(_rect, d, s, es, vol, doff, soff, ddim, sdim, ddev, sdev)


def _rect(d: int, s: int, es: int, vol: list[int], doff: list[int], soff: list[int],
          ddim: list[int], sdim: list[int], ddev: Device | None, sdev: Device | None) -> None:
    """Copy row by row (the last dimension is contiguous), without recursion."""
    nd = len(vol)
    dstride = [es * math.prod(ddim[i + 1:]) for i in range(nd)]
    sstride = [es * math.prod(sdim[i + 1:]) for i in range(nd)]
    row = es * vol[-1]
    for idx in itertools.product(*(range(v) for v in vol[:-1])):
        do = sum((doff[i] + idx[i]) * dstride[i] for i in range(nd - 1)) + doff[-1] * es
        so = sum((soff[i] + idx[i]) * sstride[i] for i in range(nd - 1)) + soff[-1] * es
        _copy(d + do, s + so, row, ddev, sdev)
