"""The drop-in's OpenMP device API bodies that need more than a call into offload.omp:
allocation and free on the initial device, llvm_omp_target_lock_mem / unlock,
memcpy / memcpy_rect / memset with pointers as ints, depend objects of nowait work,
record/replay and LIBOMPTARGET_INFO from a program."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .. import omp, omp_async, runtime
from ..errors import ErrorCode, OffloadError
from .devices import (
    OFFLOAD_SUCCESS,
    device,
    ensure_runtime,
    libomp,
    load_device,
    num_devices,
    registry,
)
from .images import addr, ffi


def _p(x: Any) -> int:
    return addr(x) if x is not None else 0


def _ptr(v: int) -> Any:
    return ffi.cast("void *", v)


def _devices_so_far() -> int:
    """omp_get_num_devices(): as LLVM 19, none in a C program before its first image
    registers (libomp asks while OMPT connects), without starting the runtime for it."""
    if (runtime._process.live is None and not registry.programs
            and getattr(sys, "_offload_capi_owns_python", False)):
        return 0
    return num_devices()


def _alloc(fn: Callable[[int, int], int], size: int, dev: int) -> int:
    return fn(size, load_device(dev)) or 0


def _free(fn: Callable[[Any, int], None], p: Any, dev: int) -> None:
    fn(_p(p), load_device(dev))


def _bind_alloc(fn: Callable[[int, int], int]) -> Callable[[int, int], Any]:
    return lambda size, dev: _ptr(_alloc(fn, size, dev))


def _bind_free(fn: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    return lambda p, dev: _free(fn, p, dev)


def _after(count: int, depobjs: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) once the async device API's depobj list is met, waited for through
    libomp (LLVM 19 makes the call a task with these dependences; offload runs it when
    they are met, before it returns): each omp_depend_t points at one kmp_depend_info_t."""
    if count > 0 and depobjs != ffi.NULL:
        _wait_depobjs(count, depobjs)
    return fn(*args)


def _wait_depobjs(count: int, depobjs: Any) -> None:
    if libomp is None:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"{count} dependence object(s) given, but "
                           f"libomp, which tracks them, is not loaded")
    objs = ffi.cast("void **", depobjs)
    infos = ffi.new("kmp_depend_info_t[]", count)
    for i in range(count):
        if objs[i] == ffi.NULL:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"dependence object {i} of {count} is NULL")
        infos[i] = ffi.cast("kmp_depend_info_t *", objs[i])[0]
    gtid = libomp.__kmpc_global_thread_num(ffi.NULL)
    libomp.__kmpc_omp_wait_deps(ffi.NULL, gtid, count, infos, 0, ffi.NULL)


# (device, pointer) -> how many locks of that host-device buffer were given back unpinned
_unpinned: dict[tuple[int, int], int] = {}


def _lock_mem(p: Any, size: int, dev: int) -> Any:
    """llvm_omp_target_lock_mem. On a host device a buffer the process may not pin (past
    RLIMIT_MEMLOCK) is used unpinned, its pointer returned with one warning, as LLVM 19's
    host plugin (whose lock pins nothing) returns it; its unlock is then a no-op. The
    Python API keeps the error (docs/semantics.md, "Pinned memory")."""
    n, host = load_device(dev), _p(p)
    d = device(n, construct=False) if 0 <= n < num_devices() else None
    if d is None or d.plugin.name != "host" or size <= 0:
        return _ptr(omp.llvm_omp_target_lock_mem(host, size, n))
    try:
        return _ptr(d.lock(host, int(size)))
    except OffloadError as exc:
        if exc.code is not ErrorCode.OUT_OF_RESOURCES:
            raise
        if not _unpinned:
            sys.stderr.write(f"omptarget warning: llvm_omp_target_lock_mem: {exc.message}; "
                             f"host device {n} uses the memory unpinned, as LLVM 19's host "
                             f"plugin does\n")
        _unpinned[(n, host)] = _unpinned.get((n, host), 0) + 1
        return p


def _unlock_mem(p: Any, dev: int) -> None:
    n, host = load_device(dev), _p(p)
    left = _unpinned.get((n, host))
    if left is None:
        omp.llvm_omp_target_unlock_mem(host, n)
    elif left > 1:
        _unpinned[(n, host)] = left - 1
    else:
        del _unpinned[(n, host)]


def _memcpy(d: Any, s: Any, n: int, do: int, so: int, dd: int, sd: int) -> int:
    return omp.omp_target_memcpy(_p(d), _p(s), n, do, so, load_device(dd), load_device(sd))


def _memcpy_rect(d: Any, s: Any, es: int, nd: int, vol: Any, doff: Any, soff: Any,
                 ddim: Any, sdim: Any, ddev: int, sdev: int) -> int:
    if d == ffi.NULL and s == ffi.NULL:        # the query form: the largest rank
        return omp.INT_MAX

    def ints(p: Any) -> list[int]:
        return [int(p[i]) for i in range(nd)] if p != ffi.NULL else []
    return omp.omp_target_memcpy_rect(_p(d), _p(s), es, nd, ints(vol), ints(doff), ints(soff),
                                      ints(ddim), ints(sdim), load_device(ddev), load_device(sdev))


def _memset(p: Any, v: int, n: int, dev: int) -> Any:
    return _ptr(omp_async.omp_target_memset(_p(p), v, n, load_device(dev)) or 0)


def _nowait_query(handle: Any) -> None:
    """offload completes target tasks before their entry points return: nothing pends."""
    if handle != ffi.NULL:
        ffi.cast("void **", handle)[0] = ffi.NULL


def _record_replay(dev: int, size: int, vaddr: Any, is_record: bool, save_output: bool,
                   offset: Any) -> int:
    """__tgt_activate_record_replay, as LLVM 19's RecordReplayTy: `size` bytes reserved on
    the device (at `vaddr` where it can) and every later allocation made in them; while
    recording, each kernel launch writes its description, image and memory (and with
    `save_output` the memory after it), which llvm-omp-kernel-replay replays; while
    replaying, __tgt_target_kernel_replay's memory lands at the block's start (and with
    `save_output` the memory after the kernel is written). *offset: how far the block
    lies below `vaddr` (the replay moves pointer arguments by it)."""
    d = device(dev, construct=False)
    if d is None:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"record/replay on device {dev}: not for the initial device")
    off = d.generic.start_record_replay(int(size), _p(vaddr), bool(is_record),
                                        bool(save_output))
    if offset != ffi.NULL:
        ffi.cast("uint64_t *", offset)[0] = off
    return OFFLOAD_SUCCESS


def _set_info(flags: int) -> None:
    """__tgt_set_info_flag: LIBOMPTARGET_INFO's bits for every device."""
    for d in ensure_runtime().manager.initialized():
        d.table.info = int(flags)


def _print_device_info(dev: int) -> int:
    d = device(dev)
    if d is None:
        return 0
    sys.stderr.write(f"Device {d.number} ({d.plugin.name}):\n")
    for k, v in d.info().items():
        sys.stderr.write(f"    {k}: {v}\n")
    return 1
