"""The asynchronous and fill functions of OpenMP's device API (omp_target_memcpy_async,
omp_target_memcpy_rect_async, omp_target_memset[_async], ompx_dump_mapping_tables) with
their C conventions, and their Pythonic twins returning Handles (memcpy_async,
memset_async, host_task).

Arguments are checked when the call is made (a bad one is an error line and -1 / 0 at
once, as the synchronous forms); the work runs on offload's workers after the Handles in
`depobj_list` / `depend` finish, and completes by `taskwait()` or `Handle.wait()`.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .arrays import buffer, integer
from .device import Device
from .diagnostics import dump_table
from .errors import ErrorCode, OffloadError
from .nowait import Handle, check_depend
from .omp_common import INT_MAX, OFFLOAD_FAIL, OFFLOAD_SUCCESS, _fail, _null
from .omp_copies import _device_array_on_device, _memcpy_plan, _rect_plan
from .plugins._libc import memset
from .runtime import current as _current
from .runtime import omp_initial_device, operation

__all__ = ["host_task", "memcpy_async", "memset_async", "omp_target_memcpy_async",
           "omp_target_memcpy_rect_async", "omp_target_memset", "omp_target_memset_async",
           "ompx_dump_mapping_tables"]


def _depobjs(count: Any, objs: Any, what: str) -> tuple[Handle, ...]:
    n = integer(count, f"{what}: depobj_count")
    if n == 0:
        return ()
    if objs is None:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{what}: depobj_count is {n} but depobj_list is None")
    deps = check_depend(list(objs)[:n], f"{what}: depobj_list")
    if len(deps) < n:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what}: depobj_count is {n} but depobj_list has {len(deps)}")
    return deps


def _spawn(plan: Callable[[], None] | None, keep: tuple, deps: tuple[Handle, ...]) -> Handle:
    """Run `plan` after `deps` on a worker; `keep` holds the arrays it reads or writes."""
    hold = list(keep)

    def work() -> None:
        if plan is not None:
            plan()
        hold.clear()
    return _current().nowait.spawn(work, depend=deps)


# ---- the C-named functions ------------------------------------------------------------
@operation
def omp_target_memcpy_async(dst: Any, src: Any, length: int, dst_offset: int,
                            src_offset: int, dst_device_num: int, src_device_num: int,
                            depobj_count: int = 0, depobj_list: Sequence[Handle] | None = None
                            ) -> int:
    """omp_target_memcpy, started after the Handles in `depobj_list`; completes by
    taskwait(). 0, or -1 after an error line for bad arguments (checked at once)."""
    what = "omp_target_memcpy_async"
    try:
        deps = _depobjs(depobj_count, depobj_list, what)
        plan = _memcpy_plan(what, dst, src, length, dst_offset, src_offset, dst_device_num,
                            src_device_num)
        _spawn(plan, (dst, src), deps)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


@operation
def omp_target_memcpy_rect_async(dst: Any, src: Any, element_size: int, num_dims: int,
                                 volume: Sequence[int], dst_offsets: Sequence[int],
                                 src_offsets: Sequence[int], dst_dimensions: Sequence[int],
                                 src_dimensions: Sequence[int], dst_device_num: int,
                                 src_device_num: int, depobj_count: int = 0,
                                 depobj_list: Sequence[Handle] | None = None) -> int:
    """omp_target_memcpy_rect, started after the Handles in `depobj_list`; completes by
    taskwait(). 0, or -1 after an error line; with both pointers NULL, the number of
    dimensions supported (as the synchronous form)."""
    if _null(dst) and _null(src):
        return INT_MAX
    what = "omp_target_memcpy_rect_async"
    try:
        deps = _depobjs(depobj_count, depobj_list, what)
        plan = _rect_plan(what, dst, src, element_size, num_dims, volume, dst_offsets,
                          src_offsets, dst_dimensions, src_dimensions, dst_device_num,
                          src_device_num)
        _spawn(plan, (dst, src), deps)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        return _fail(exc, OFFLOAD_FAIL)


def _memset_plan(what: str, ptr: Any, value: Any, count: Any,
                 device_num: Any) -> tuple[int, Callable[[], None] | None]:
    """Check a memset's arguments: (address, the fill to run or None for 0 bytes)."""
    dev = _current().device(device_num)
    p, limit = buffer(ptr, f"{what}: ptr", writable=True)
    v = integer(value, f"{what}: value", minimum=-(2**31), maximum=2**31 - 1)
    n = integer(count, f"{what}: count")
    _device_array_on_device(ptr, dev, f"{what}: ptr")
    if n == 0:
        return p, None
    if p == 0:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"{what}: NULL pointer")
    if limit is not None and n > limit:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{what}: {n} bytes lie past the end of its {limit}-byte buffer")
    if dev is None:
        return p, functools.partial(memset, p, v & 0xFF, n)
    dev.check_range(p, n, f"{what}: ptr")
    return p, functools.partial(_fill, dev, p, v, n)


def _fill(dev: Device, p: int, value: int, n: int) -> None:
    dev.fill(p, value, n)


@operation
def omp_target_memset(ptr: Any, value: int, count: int, device_num: int) -> int:
    """Set `count` bytes at `ptr` on `device_num` to the byte `value` (a device-side fill
    on GPUs that have one). Returns `ptr`, or 0 after an error line."""
    try:
        p, plan = _memset_plan("omp_target_memset", ptr, value, count, device_num)
        if plan is not None:
            plan()
        return p
    except OffloadError as exc:
        return _fail(exc, 0)


@operation
def omp_target_memset_async(ptr: Any, value: int, count: int, device_num: int,
                            depobj_count: int = 0,
                            depobj_list: Sequence[Handle] | None = None) -> int:
    """omp_target_memset, started after the Handles in `depobj_list`; completes by
    taskwait(). Returns `ptr`, or 0 after an error line."""
    what = "omp_target_memset_async"
    try:
        deps = _depobjs(depobj_count, depobj_list, what)
        p, plan = _memset_plan(what, ptr, value, count, device_num)
        _spawn(plan, (ptr,), deps)
        return p
    except OffloadError as exc:
        return _fail(exc, 0)


@operation
def ompx_dump_mapping_tables() -> None:
    """Print every device's mapping table to stdout, as LLVM's ompx_dump_mapping_tables."""
    for dev in sorted(_current().manager.initialized(), key=lambda d: d.number):
        print(dump_table(dev.number, dev.table.entries(), "libomptarget:0:0"))


# ---- the Pythonic twins ----------------------------------------------------------------
@operation
def memcpy_async(dst: Any, src: Any, nbytes: int, *, dst_offset: int = 0, src_offset: int = 0,
                 dst_device: int | None = None, src_device: int | None = None,
                 depend: Sequence[Handle] = ()) -> Handle:
    """Copy `nbytes` between devices after the `depend` Handles; a Handle to wait on.
    None for a device means the initial device (the host).

    Raises:
        OffloadError: for bad arguments, at once (errors of the copy itself come from
            `wait()`)."""
    init = omp_initial_device
    deps = check_depend(depend, "memcpy_async: depend")
    plan = _memcpy_plan("memcpy_async", dst, src, nbytes, dst_offset, src_offset,
                        init if dst_device is None else dst_device,
                        init if src_device is None else src_device)
    return _spawn(plan, (dst, src), deps)


@operation
def memset_async(ptr: Any, value: int, nbytes: int, *, device: int | None = None,
                 depend: Sequence[Handle] = ()) -> Handle:
    """Fill `nbytes` at `ptr` on `device` (None: the default device) with the byte
    `value` after the `depend` Handles; a Handle to wait on."""
    deps = check_depend(depend, "memset_async: depend")
    _, plan = _memset_plan("memset_async", ptr, value, nbytes, device)
    return _spawn(plan, (ptr,), deps)


@operation
def host_task(fn: Callable[..., Any], *args: Any, depend: Sequence[Handle] = ()) -> Handle:
    """Run fn(*args) on offload's workers after the `depend` Handles: host work in a
    dependence chain. `wait()` returns its result."""
    if not callable(fn):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"host_task: expected a callable, got {type(fn).__name__}")
    deps = check_depend(depend, "host_task: depend")
    return _current().nowait.spawn(fn, *args, depend=deps)
