"""The OpenMP-named API (docs/design.md §4): C names and C conventions.

Failures return 0 (a pointer) or -1 (a status) after one `omptarget error:` line on
stderr; a device number that is not a device raises, where LLVM aborts.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import tracing
from .arrays import buffer, integer
from .config import Info
from .errors import ErrorCode, OffloadError
from .omp_common import INT_MAX, OFFLOAD_FAIL, OFFLOAD_SUCCESS, _device, _fail, _within
from .omp_copies import omp_target_memcpy, omp_target_memcpy_rect
from .plugins.common import AllocKind
from .runtime import current as _current
from .runtime import (
    omp_initial_device,
    omp_invalid_device,
    operation,
    release_operation,
    resource_operation,
)
from .runtime import torn_down as _torn_down

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


# ---- devices ------------------------------------------------------------------------
@operation
def omp_get_num_devices() -> int:
    """The number of offload devices (the initial device not counted)."""
    return _current().num_devices()


@operation
def omp_get_initial_device() -> int:
    """The initial device's number: equal to omp_get_num_devices(), as in LLVM."""
    return _current().num_devices()


@operation
def omp_get_default_device() -> int:
    """The calling thread's default device, as set (libomp returns the ICV unchecked);
    the initial device under OMP_TARGET_OFFLOAD=disabled."""
    return _current().default_device


@operation
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
def _alloc(size: Any, device_num: Any, kind: AllocKind, name: str) -> int:
    dev = _device(device_num)
    try:
        n = integer(size, f"{name}: size", minimum=-(2**63))
        if n <= 0:
            return 0                               # as LLVM: no error, NULL
        if dev is None:
            return _current().manager.initial_plugin().data_alloc(0, n, kind)
        return dev.alloc(n, kind)
    except OffloadError as exc:
        return _fail(exc, 0)


def _free(ptr: Any, device_num: Any, kind: AllocKind, name: str) -> None:
    if _torn_down():
        return
    dev = _device(device_num)
    try:
        p = buffer(ptr, f"{name}: ptr")[0]
        if p == 0:
            return
        if dev is None:
            host = _current().manager.initial_plugin()
            if host.device(0).allocation(p) is None:
                raise OffloadError(ErrorCode.NOT_FOUND,
                                   f"{name}: 0x{p:x} is not memory {name.replace('free', 'alloc')} "
                                   f"gave for the initial device ({_current().num_devices()})")
            host.data_delete(0, p, kind)
        else:
            dev.free(p, kind)
    except OffloadError as exc:
        _fail(exc, None)


def _allocator(name: str, kind: AllocKind, what: str) -> Callable[[int, int], int]:
    def fn(size: int, device_num: int) -> int:
        return _alloc(size, device_num, kind, name)

    def undo(p: int, size: Any, device_num: Any) -> None:   # the caller never got p
        if p:
            _free_op(p, device_num, kind, name.replace("alloc", "free"))
    fn.__name__ = fn.__qualname__ = name
    fn = resource_operation(undo)(fn)
    fn.__doc__ = (f"Allocate `size` bytes of {what} for `device_num`; the address, or 0 "
                  f"(size <= 0, or an error line for a bad size or a failure).")
    return fn


_free_op = operation(_free)


def _deallocator(name: str, kind: AllocKind, what: str) -> Callable[[Any, int], None]:
    def fn(ptr: Any, device_num: int) -> None:
        if not _torn_down():                       # after teardown: a quiet no-op
            _free(ptr, device_num, kind, name)
    fn.__name__ = fn.__qualname__ = name
    fn = release_operation(fn)
    fn.__doc__ = (f"Free {what} from the matching allocation call; NULL is ignored, an "
                  f"unknown pointer prints an error.")
    return fn


_DEVICE_MEM = "device memory"
_INFO_EXISTS = int(Info.MAPPING_EXISTS)
_HOST_MEM = "pinned host memory the device can access"
_SHARED_MEM = "memory shared (managed) between host and device"
omp_target_alloc = _allocator("omp_target_alloc", AllocKind.DEVICE, _DEVICE_MEM)
"""omp_target_alloc(size, device_num) -> int: `size` bytes of device memory, or 0."""
omp_target_free = _deallocator("omp_target_free", AllocKind.DEVICE, _DEVICE_MEM)
"""omp_target_free(ptr, device_num): frees omp_target_alloc's memory (NULL: nothing)."""
llvm_omp_target_alloc_device = _allocator("llvm_omp_target_alloc_device", AllocKind.DEVICE,
                                          _DEVICE_MEM)
"""llvm_omp_target_alloc_device(size, device_num) -> int: device memory, or 0."""
llvm_omp_target_alloc_host = _allocator("llvm_omp_target_alloc_host", AllocKind.HOST, _HOST_MEM)
"""llvm_omp_target_alloc_host(size, device_num) -> int: pinned host memory the device
reaches (a page-locked allocation, found by later maps as pinned), or 0."""
llvm_omp_target_alloc_shared = _allocator("llvm_omp_target_alloc_shared", AllocKind.SHARED,
                                          _SHARED_MEM)
"""llvm_omp_target_alloc_shared(size, device_num) -> int: managed memory host and device
both reach, or 0."""
llvm_omp_target_free_device = _deallocator("llvm_omp_target_free_device", AllocKind.DEVICE,
                                           _DEVICE_MEM)
"""llvm_omp_target_free_device(ptr, device_num): frees llvm_omp_target_alloc_device's."""
llvm_omp_target_free_host = _deallocator("llvm_omp_target_free_host", AllocKind.HOST, _HOST_MEM)
"""llvm_omp_target_free_host(ptr, device_num): frees llvm_omp_target_alloc_host's."""
llvm_omp_target_free_shared = _deallocator("llvm_omp_target_free_shared", AllocKind.SHARED,
                                           _SHARED_MEM)
"""llvm_omp_target_free_shared(ptr, device_num): frees llvm_omp_target_alloc_shared's."""


# ---- associations and queries ----------------------------------------------------------
@operation
def omp_target_associate_ptr(host_ptr: Any, device_ptr: Any, size: int, device_offset: int,
                             device_num: int) -> int:
    """Map [host_ptr, +size) to device_ptr + device_offset with an infinite count; 0 / -1."""
    dev = _device(device_num)
    what = "omp_target_associate_ptr"
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"{what}: the initial device needs no association")
        n = integer(size, f"{what}: size", minimum=1)
        off = integer(device_offset, f"{what}: device_offset")
        h = buffer(host_ptr, f"{what}: host_ptr")[0]
        t = buffer(device_ptr, f"{what}: device_ptr")[0]
        if h == 0 or t == 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"{what}: NULL {'host_ptr' if h == 0 else 'device_ptr'}")
        tracing.note(tracing.ASSOCIATE, h, None, t, dev.number, n)
        dev.table.associate(h, t + off, n)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


@operation
def omp_target_disassociate_ptr(host_ptr: Any, device_num: int) -> int:
    """Remove an association made by omp_target_associate_ptr; 0 / -1."""
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "omp_target_disassociate_ptr: not for the initial device")
        h = buffer(host_ptr, "omp_target_disassociate_ptr: host_ptr")[0]
        tracing.note(tracing.DISASSOCIATE, h, None, 0, dev.number, 0)
        dev.table.disassociate(h)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


@operation
def omp_get_mapped_ptr(ptr: Any, device_num: int) -> int:
    """The device address `ptr` is mapped to on `device_num`; 0 when unmapped."""
    dev = _device(device_num)
    try:
        p = buffer(ptr, "omp_get_mapped_ptr: ptr")[0]
    except OffloadError as exc:
        return _fail(exc, 0)
    if p == 0:
        return 0
    if dev is None:
        return p
    e = dev.table.lookup(p, 1)          # one byte, as LLVM 19 looks it up
    if e is not None and dev.table.info & _INFO_EXISTS:
        dev.table.say_found(p, 1, e)        # as LLVM's lookup of one byte reports it
    return 0 if e is None else e.tgt_begin + (p - e.hst_begin)


@operation
def omp_target_is_present(ptr: Any, device_num: int) -> int:
    """1 when `ptr` is mapped on `device_num` (always on the initial device), else 0."""
    dev = _device(device_num)
    try:
        p = buffer(ptr, "omp_target_is_present: ptr")[0]
    except OffloadError as exc:
        return _fail(exc, 0)
    if dev is None:
        return 1
    if p == 0:
        return 0
    e = dev.table.lookup(p, 1)          # one byte, as LLVM 19 looks it up
    if e is not None and dev.table.info & _INFO_EXISTS:
        dev.table.say_found(p, 1, e)
    return int(e is not None)


@operation
def omp_target_is_accessible(ptr: Any, size: int, device_num: int) -> int:
    """1 when the device can access [ptr, ptr+size) of host memory directly."""
    dev = _device(device_num)
    try:
        n = integer(size, "omp_target_is_accessible: size")
        p = buffer(ptr, "omp_target_is_accessible: ptr")[0]
    except OffloadError as exc:
        return _fail(exc, 0)
    if dev is None:
        return 1
    if p == 0:
        return 0
    return int(dev.is_accessible(p, n))


# ---- pinning (D139208) ---------------------------------------------------------------
@resource_operation(lambda got, ptr, size, device_num: got and _unlock_mem(ptr, device_num))
def llvm_omp_target_lock_mem(ptr: Any, size: int, device_num: int) -> int:
    """Pin [ptr, ptr+size) for device_num (reference counted); the device-accessible
    address, or 0 after one error line."""
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot lock memory for the initial device ({device_num})")
        n = integer(size, "llvm_omp_target_lock_mem: size", minimum=-(2**63))
        p, limit = buffer(ptr, "llvm_omp_target_lock_mem: ptr")
        _within(limit, 0, max(n, 0), "llvm_omp_target_lock_mem: ptr")
        return dev.lock(p, n, owner=ptr if limit is not None else None)
    except OffloadError as exc:
        return _fail(exc, 0)


@release_operation
def llvm_omp_target_unlock_mem(ptr: Any, device_num: int) -> None:
    """Drop one lock of the buffer containing ptr; a no-op after teardown."""
    if not _torn_down():
        _unlock_mem(ptr, device_num)


@operation
def _unlock_mem(ptr: Any, device_num: int) -> None:
    dev = _device(device_num)
    try:
        if dev is None:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot unlock memory for the initial device ({device_num})")
        dev.unlock(buffer(ptr, "llvm_omp_target_unlock_mem: ptr")[0])
    except OffloadError as exc:
        _fail(exc, None)
