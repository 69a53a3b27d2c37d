"""The OpenMP-named API (DESIGN.md §4): C names and C conventions.

Failures return 0 (a pointer) or -1 (a status) after one `omptarget error:` line on
stderr; a device number that is not a device raises, where LLVM aborts.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .arrays import address
from .device import Device
from .errors import ErrorCode, OffloadError
from .plugins.common import AllocKind, memmove
from .runtime import current as _current
from .runtime import omp_initial_device, omp_invalid_device
from .runtime import torn_down as _torn_down

OFFLOAD_SUCCESS = 0
OFFLOAD_FAIL = -1
INT_MAX = 2**31 - 1

__all__ = [
    "INT_MAX", "OFFLOAD_FAIL", "OFFLOAD_SUCCESS", "llvm_omp_target_alloc_device",
    "llvm_omp_target_alloc_host", "llvm_omp_target_alloc_shared", "llvm_omp_target_free_device",
    "llvm_omp_target_free_host", "llvm_omp_target_free_shared", "llvm_omp_target_lock_mem",
    "llvm_omp_target_unlock_mem", "omp_get_default_device", "omp_get_initial_device",
    "omp_get_mapped_ptr", "omp_get_num_devices", "omp_initial_device", "omp_invalid_device",
    "omp_is_initial_device", "omp_set_default_device", "omp_target_alloc",
    "omp_target_associate_ptr", "omp_target_disassociate_ptr", "omp_target_free",
    "omp_target_is_accessible", "omp_target_is_present", "omp_target_memcpy",
    "omp_target_memcpy_rect",
]


def _device(n: Any) -> Device | None:
    return _current().device(n)


def _fail(exc: OffloadError, value: Any) -> Any:
    print(f"omptarget error: {exc.message}", file=sys.stderr)
    return value


# ---- devices ------------------------------------------------------------------------
def omp_get_num_devices() -> int:
    """The number of offload devices (the initial device not counted)."""
    return _current().num_devices()


def omp_get_initial_device() -> int:
    """The initial device's number: equal to omp_get_num_devices(), as in LLVM."""
    return _current().num_devices()


def omp_get_default_device() -> int:
    """The calling thread's default device, as set (libomp returns the ICV unchecked)."""
    return _current().default_device


def omp_set_default_device(n: int) -> None:
    """Set the calling thread's default device for constructs without `device=`.

    As in libomp the number is not checked here: a construct that then uses a number
    that is neither a device nor the initial device raises INVALID_VALUE (LLVM aborts).
    With no offload device at all, constructs run on the initial device."""
    try:
        value = int(n)
    except (TypeError, ValueError):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"omp_set_default_device: expected a device number, got "
                           f"{type(n).__name__} {n!r}") from None
    _current().default_device = value


def omp_is_initial_device() -> int:
    """1: Python code runs on the host, which is the initial device."""
    return 1


# ---- allocation: one table for the six alloc/free functions ----------------------------
def _alloc(size: int, device_num: int, kind: AllocKind) -> int:
    dev = _device(device_num)
    if size <= 0:
        return 0
    try:
        if dev is None:
            return _current().manager.initial_plugin().data_alloc(0, size, kind)
        return dev.alloc(size, kind)
    except OffloadError as exc:
        return _fail(exc, 0)


def _free(ptr: Any, device_num: int, kind: AllocKind) -> None:
    if _torn_down():
        return
    dev = _device(device_num)
    p = address(ptr)
    if p == 0:
        return
    try:
        if dev is None:
            _current().manager.initial_plugin().data_delete(0, p, kind)
        else:
            dev.free(p, kind)
    except OffloadError as exc:
        _fail(exc, None)


def _allocator(name: str, kind: AllocKind, what: str) -> Callable[[int, int], int]:
    def fn(size: int, device_num: int) -> int:
        return _alloc(size, device_num, kind)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Allocate `size` bytes of {what} for `device_num`; the address, or 0 on "
                  f"failure (size <= 0 included).")
    return fn


def _deallocator(name: str, kind: AllocKind, what: str) -> Callable[[Any, int], None]:
    def fn(ptr: Any, device_num: int) -> None:
        _free(ptr, device_num, kind)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Free {what} from the matching allocation call; NULL is ignored, an "
                  f"unknown pointer prints an error.")
    return fn


_DEVICE_MEM = "device memory"
_HOST_MEM = "pinned host memory the device can access"
_SHARED_MEM = "memory shared (managed) between host and device"
omp_target_alloc = _allocator("omp_target_alloc", AllocKind.DEVICE, _DEVICE_MEM)
omp_target_free = _deallocator("omp_target_free", AllocKind.DEVICE, _DEVICE_MEM)
llvm_omp_target_alloc_device = _allocator("llvm_omp_target_alloc_device", AllocKind.DEVICE,
                                          _DEVICE_MEM)
llvm_omp_target_alloc_host = _allocator("llvm_omp_target_alloc_host", AllocKind.HOST, _HOST_MEM)
llvm_omp_target_alloc_shared = _allocator("llvm_omp_target_alloc_shared", AllocKind.SHARED,
                                          _SHARED_MEM)
llvm_omp_target_free_device = _deallocator("llvm_omp_target_free_device", AllocKind.DEVICE,
                                           _DEVICE_MEM)
llvm_omp_target_free_host = _deallocator("llvm_omp_target_free_host", AllocKind.HOST, _HOST_MEM)
llvm_omp_target_free_shared = _deallocator("llvm_omp_target_free_shared", AllocKind.SHARED,
                                           _SHARED_MEM)


# ---- copies -------------------------------------------------------------------------
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


def omp_target_memcpy(dst: Any, src: Any, length: int, dst_offset: int, src_offset: int,
                      dst_device_num: int, src_device_num: int) -> int:
    """Copy `length` bytes between any two devices (the initial device included).

    Returns 0, or -1 after an error line (negative sizes, NULL pointers, driver errors).

    >>> omp_target_memcpy(dst, a, a.nbytes, 0, 0, 0, omp_get_initial_device())
    0
    """
    ddev, sdev = _device(dst_device_num), _device(src_device_num)
    try:
        if length < 0 or dst_offset < 0 or src_offset < 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"omp_target_memcpy: negative length or offset "
                               f"({length}, {dst_offset}, {src_offset})")
        if length == 0:
            return OFFLOAD_SUCCESS
        d, s = address(dst), address(src)
        if d == 0 or s == 0:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"omp_target_memcpy: NULL {'dst' if d == 0 else 'src'} pointer")
        _copy(d + dst_offset, s + src_offset, length, ddev, sdev)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def omp_target_memcpy_rect(dst: Any, src: Any, element_size: int, num_dims: int,
                           volume: Sequence[int], dst_offsets: Sequence[int],
                           src_offsets: Sequence[int], dst_dimensions: Sequence[int],
                           src_dimensions: Sequence[int], dst_device_num: int,
                           src_device_num: int) -> int:
    """Copy a `num_dims`-dimensional sub-block; INT_MAX when both pointers are NULL
    (the number of dimensions supported), else 0 or -1 as omp_target_memcpy."""
    d, s = address(dst), address(src)
    if d == 0 and s == 0:
        return INT_MAX
    ddev, sdev = _device(dst_device_num), _device(src_device_num)
    try:
        if d == 0 or s == 0 or element_size <= 0 or num_dims <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"omp_target_memcpy_rect: bad arguments (dst=0x{d:x}, src=0x{s:x}, "
                               f"element_size={element_size}, num_dims={num_dims})")
        for name, seq in (("volume", volume), ("dst_offsets", dst_offsets),
                          ("src_offsets", src_offsets), ("dst_dimensions", dst_dimensions),
                          ("src_dimensions", src_dimensions)):
            if len(seq) < num_dims:
                raise OffloadError(ErrorCode.INVALID_VALUE,
                                   f"omp_target_memcpy_rect: {name} has {len(seq)} entries, "
                                   f"num_dims is {num_dims}")
        _rect(d, s, element_size, num_dims, list(volume), list(dst_offsets),
              list(src_offsets), list(dst_dimensions), list(src_dimensions), ddev, sdev)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def _rect(d: int, s: int, es: int, nd: int, vol: list[int], doff: list[int],
          soff: list[int], ddim: list[int], sdim: list[int], ddev: Device | None,
          sdev: Device | None) -> None:
    if nd == 1:
        _copy(d + es * doff[0], s + es * soff[0], es * vol[0], ddev, sdev)
        return
    dslice = sslice = es
    for x in ddim[1:nd]:
        dslice *= x
    for x in sdim[1:nd]:
        sslice *= x
    for i in range(vol[0]):
        _rect(d + dslice * (doff[0] + i), s + sslice * (soff[0] + i), es, nd - 1, vol[1:],
              doff[1:], soff[1:], ddim[1:], sdim[1:], ddev, sdev)


# ---- associations and queries ----------------------------------------------------------
def omp_target_associate_ptr(host_ptr: Any, device_ptr: Any, size: int, device_offset: int,
                             device_num: int) -> int:
    """Map [host_ptr, +size) to device_ptr + device_offset with an infinite count; 0 / -1."""
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "omp_target_associate_ptr: the initial device needs no association")
        h, t = address(host_ptr), address(device_ptr)
        if h == 0 or t == 0 or size <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"omp_target_associate_ptr: bad arguments (host=0x{h:x}, "
                               f"device=0x{t:x}, size={size})")
        dev.table.associate(h, t + device_offset, size)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def omp_target_disassociate_ptr(host_ptr: Any, device_num: int) -> int:
    """Remove an association made by omp_target_associate_ptr; 0 / -1."""
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "omp_target_disassociate_ptr: not for the initial device")
        dev.table.disassociate(address(host_ptr))
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def omp_get_mapped_ptr(ptr: Any, device_num: int) -> int:
    """The device address `ptr` is mapped to on `device_num`; 0 when unmapped."""
    dev = _device(device_num)
    p = address(ptr)
    if p == 0:
        return 0
    if dev is None:
        return p
    e = dev.table.lookup(p, 0)
    return 0 if e is None else e.tgt_begin + (p - e.hst_begin)


def omp_target_is_present(ptr: Any, device_num: int) -> int:
    """1 when `ptr` is mapped on `device_num` (always on the initial device), else 0."""
    dev = _device(device_num)
    p = address(ptr)
    if dev is None:
        return 1
    if p == 0:
        return 0
    return int(dev.table.lookup(p, 0) is not None)


def omp_target_is_accessible(ptr: Any, size: int, device_num: int) -> int:
    """1 when the device can access [ptr, ptr+size) of host memory directly."""
    dev = _device(device_num)
    if dev is None:
        return 1
    p = address(ptr)
    if p == 0 or size < 0:
        return 0
    return int(dev.is_accessible(p, size))


# ---- pinning (D139208) ---------------------------------------------------------------
def llvm_omp_target_lock_mem(ptr: Any, size: int, device_num: int) -> int:
    """Pin [ptr, ptr+size) for device_num; the device-accessible address, or 0."""
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot lock memory for the initial device ({device_num})")
        return dev.lock(address(ptr), size, owner=ptr if not isinstance(ptr, int) else None)
    except OffloadError as exc:
        return _fail(exc, 0)


def llvm_omp_target_unlock_mem(ptr: Any, device_num: int) -> None:
    """Drop one lock of the buffer containing ptr; a no-op after teardown."""
    if _torn_down():
        return
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot unlock memory for the initial device ({device_num})")
        dev.unlock(address(ptr))
    except OffloadError as exc:
        _fail(exc, None)
