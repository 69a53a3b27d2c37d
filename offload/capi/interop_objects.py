"""OpenMP interop objects (omp_interop_t) at the C API, for devices with no foreign
runtime to hand out: the object names its device; other properties report no value."""
from __future__ import annotations

from typing import Any

from .devices import device_number, libomp
from .images import addr, ffi

_interops: dict[int, tuple[Any, int]] = {}
_TASKSYNC = 2                   # kmp_interop_type_tasksync (clang-19 passes 2)
_OMP_IPR_FR_ID, _OMP_IPR_DEVICE_NUM = -1, -5
_IRC_SUCCESS, _IRC_NO_VALUE, _IRC_OUT_OF_RANGE, _IRC_TYPE_INT = 0, 1, -5, -2
_PROPS = {-1: b"fr_id", -2: b"fr_name", -3: b"vendor", -4: b"vendor_name", -5: b"device_num",
          -6: b"platform", -7: b"device", -8: b"device_context", -9: b"targetsync"}


def _wait_deps(loc: Any, gtid: int, ndeps: int, deps: Any) -> None:
    """The construct's depend clauses, waited for through libomp (as LLVM 19 does for a
    targetsync object: the tasks they name have finished)."""
    if ndeps > 0 and libomp is not None and addr(deps):
        libomp.__kmpc_omp_wait_deps(ffi.cast("void *", addr(loc)), gtid, ndeps,
                                     ffi.cast("void *", addr(deps)), 0, ffi.NULL)


def interop_init(loc: Any, gtid: int, interop: Any, kind: int, dev: int, ndeps: int = 0,
                 deps: Any = None, nowait: int = 0) -> None:
    """An interop object naming the device (no foreign runtime: properties beyond the
    device number report no value); a targetsync one after its dependences."""
    n = device_number(dev)
    if kind == _TASKSYNC:
        _wait_deps(loc, gtid, ndeps, deps)
    obj = ffi.new("int64_t[2]", [n, kind])
    _interops[addr(obj)] = (obj, n)
    ffi.cast("void **", interop)[0] = obj


def interop_use(loc: Any, gtid: int, interop: Any, dev: int, ndeps: int, deps: Any,
                nowait: int) -> None:
    """`interop use`: a targetsync object waits for the construct's dependences (no
    foreign queue to flush); with nowait nothing waits, as LLVM 19."""
    found = _interops.get(addr(ffi.cast("void **", interop)[0]))
    if found is not None and found[0][1] == _TASKSYNC and not nowait:
        _wait_deps(loc, gtid, ndeps, deps)


def interop_destroy(loc: Any, gtid: int, interop: Any, dev: int = -1, ndeps: int = 0,
                    deps: Any = None, nowait: int = 0) -> None:
    p = ffi.cast("void **", interop)
    found = _interops.pop(addr(p[0]), None)
    if found is not None and found[0][1] == _TASKSYNC and not nowait:
        _wait_deps(loc, gtid, ndeps, deps)
    p[0] = ffi.NULL


def _ret(code: Any, v: int) -> None:
    if code != ffi.NULL:
        code[0] = v


def interop_int(interop: Any, prop: int, code: Any) -> int:
    found = _interops.get(addr(interop))
    if found is None:
        _ret(code, _IRC_OUT_OF_RANGE if interop == ffi.NULL else _IRC_NO_VALUE)
        return 0
    if prop == _OMP_IPR_DEVICE_NUM:
        _ret(code, _IRC_SUCCESS)
        return found[1]
    _ret(code, _IRC_NO_VALUE)
    return 0


def interop_ptr(interop: Any, prop: int, code: Any) -> Any:
    _ret(code, _IRC_NO_VALUE if addr(interop) in _interops else _IRC_OUT_OF_RANGE)
    return ffi.NULL


def interop_str(interop: Any, prop: int, code: Any) -> Any:
    _ret(code, _IRC_NO_VALUE if addr(interop) in _interops else _IRC_OUT_OF_RANGE)
    return ffi.NULL


_NAMES = {k: ffi.new("char[]", v) for k, v in _PROPS.items()}


def interop_name(interop: Any, prop: int) -> Any:
    return _NAMES.get(prop, ffi.NULL)


_TYPE_DESC = ffi.new("char[]", b"int")


def interop_type_desc(interop: Any, prop: int) -> Any:
    return _TYPE_DESC if prop in _PROPS else ffi.NULL
