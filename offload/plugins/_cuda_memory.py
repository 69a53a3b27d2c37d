"""Page-locking host memory with the CUDA driver: registrations made in chunks on an
absolute address grid (one registration of 512 GiB or more fails on r580+ drivers, and a
copy may not span two registrations: common.py splits copies on the same grid), writable
when the pages allow it, and the registration a foreign library made."""
from __future__ import annotations

from ..errors import ErrorCode, OffloadError
from . import _cuda_driver as C
from ._cuda_driver import Driver, ffi
from ._cuda_driver import ptr as _ptr


def chunks(host: int, size: int, grid: int | None) -> list[tuple[int, int]]:
    """[host, host+size) cut at multiples of `grid` (None: one piece)."""
    step = grid or size
    out, p, end = [], host, host + size
    while p < end:
        q = min(end, (p // step + 1) * step)
        out.append((p, q - p))
        p = q
    return out


def register(drv: Driver, host: int, size: int, read_only: bool, grid: int | None) -> bool:
    """cuMemHostRegister [host, host+size) chunk by chunk (PORTABLE | DEVICEMAP); writable
    when the pages allow it, READ_ONLY only as the fallback for read-only pages. Returns
    whether it had to register READ_ONLY. Undone entirely on any failure."""
    flags = C.CU_MEMHOSTREGISTER_PORTABLE | C.CU_MEMHOSTREGISTER_DEVICEMAP
    done: list[int] = []
    ro = False
    try:
        for p, n in chunks(host, size, grid):
            rc = drv.lib.cuMemHostRegister_v2(_ptr(p), n, flags)
            foreign = rc == C.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
            if rc != C.CUDA_SUCCESS and read_only and not foreign:    # read-only pages
                rc = drv.lib.cuMemHostRegister_v2(_ptr(p), n,
                                                  flags | C.CU_MEMHOSTREGISTER_READ_ONLY)
                ro = ro or rc == C.CUDA_SUCCESS
            if rc == C.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"0x{host:x} ({size} bytes) overlaps host memory another "
                                   f"library registered with CUDA (at or after 0x{p:x}): lock "
                                   f"exactly its range, or none of it")
            if rc == C.CUDA_ERROR_OUT_OF_MEMORY:
                raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                                   f"cuMemHostRegister(0x{p:x}, {n}) failed: {drv.text(rc)}")
            drv.check(rc, f"cuMemHostRegister(0x{p:x}, {n})")
            done.append(p)
    except BaseException:
        for p in done:
            drv.lib.cuMemHostUnregister(_ptr(p))
        raise
    return ro


def unregister(drv: Driver, host: int, size: int, grid: int | None) -> None:
    """Undo `register`: each chunk at its own base; the first failure is raised."""
    error = None
    for p, _ in chunks(host, size, grid):
        rc = drv.lib.cuMemHostUnregister(_ptr(p))
        if rc != C.CUDA_SUCCESS and error is None:
            error = (rc, p)
    if error is not None:
        drv.check(error[0], f"cuMemHostUnregister(0x{error[1]:x})")


def registration(drv: Driver, host: int) -> tuple[int, int] | None:
    """(base, size) of the page-locked registration containing `host`, or None."""
    lib = drv.lib
    mtype = ffi.new("unsigned int *")
    rc = lib.cuPointerGetAttribute(mtype, C.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host)
    if rc == C.CUDA_ERROR_INVALID_VALUE or (rc == 0 and mtype[0] != C.CU_MEMORYTYPE_HOST):
        return None                 # pageable: not pinned, not an error
    drv.check(rc, "cuPointerGetAttribute(MEMORY_TYPE)")
    start = ffi.new("CUdeviceptr *")
    rsize = ffi.new("size_t *")
    if (lib.cuPointerGetAttribute(start, C.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, host) != 0
            or lib.cuPointerGetAttribute(rsize, C.CU_POINTER_ATTRIBUTE_RANGE_SIZE, host) != 0):
        return host, 1
    return int(start[0]), int(rsize[0])
