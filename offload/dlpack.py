"""DLPack at the C level, with cffi: capsules of the DLPack 1.0 versioned layout (and the
0.x layout for consumers that ask for no version) whose deleter a consumer calls, and
reading the device pointer of a foreign array (CUDA Array Interface, or DLPack)."""
from __future__ import annotations

import ctypes
import math
import types
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from . import _accel, locks
from ._lazy import numpy as np
from .errors import ErrorCode, OffloadError
from .ffi_cache import ffi_for
from .interrupts import defers_interrupts, finalizer

__all__ = ["KDL_CPU", "KDL_CUDA", "KDL_CUDA_HOST", "KDL_ROCM", "KDL_ROCM_HOST",
           "ForeignPointer", "Layout", "capsule", "foreign_pointer", "is_foreign", "make_capsule",
           "register_stream_waiter", "unregister_stream_waiter"]

_ffi = ffi_for("dlpack", """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef struct DLManagedTensor {
  DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
""")

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST = 1, 2, 3, 10, 11
_DTYPE_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_READ_ONLY = 1                                     # DLPACK_FLAG_BITMASK_READ_ONLY
_VERSIONED, _LEGACY = b"dltensor_versioned", b"dltensor"

# prototypes of our own: ctypes.pythonapi's function objects are shared process-wide
# (another module setting their argtypes would change ours)
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_get_pointer_obj = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_is_valid_obj = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))

# what a live capsule needs: kept until its deleter runs
_alive: dict[int, tuple] = {}
_alive_lock = locks.new_lock()


def _release(address: int) -> None:
    """A managed tensor's deleter ran: what its capsule kept alive goes."""
    with _alive_lock:
        _alive.pop(address, None)


_T_VERSIONED = _ffi.typeof("DLManagedTensorVersioned *")
_T_LEGACY = _ffi.typeof("DLManagedTensor *")
_T_UINTPTR = _ffi.typeof("uintptr_t")
_cast = getattr(_ffi, "_backend", _ffi).cast   # cast without a type-name lookup


@_ffi.callback("void(DLManagedTensorVersioned *)")
@finalizer
def _delete_versioned(self: Any) -> None:
    _release(int(_cast(_T_UINTPTR, self)))


@_ffi.callback("void(DLManagedTensor *)")
@finalizer
def _delete_legacy(self: Any) -> None:
    _release(int(_cast(_T_UINTPTR, self)))


_UNCONSUMED = {_VERSIONED: _T_VERSIONED, _LEGACY: _T_LEGACY}


@finalizer
def _capsule_destructor(capsule: int) -> None:
    """A capsule nobody consumed: call its tensor's deleter (the DLPack rule). A
    consumer renames what it takes ("used_dltensor..."): nothing to do then."""
    name = _get_name(capsule)
    ctype = _UNCONSUMED.get(name)
    if ctype is not None:
        managed = _cast(ctype, _get_pointer(capsule, name))
        if managed.deleter != _ffi.NULL:
            managed.deleter(managed)


_DESTROY = _DESTRUCTOR(_capsule_destructor)


class _Entries:
    """The deleter and capsule destructor capsules carry: the compiled module's C entries
    where it builds (accel_c/dlpack.c: a consumer may run them from a deallocation while
    an exception propagates, which they keep for it), else the Python callbacks above,
    which cannot keep it (docs/semantics.md)."""

    got: tuple[Any, Any, int] | None = None       # (versioned, legacy, destructor)

    @classmethod
    def get(cls) -> tuple[Any, Any, int]:
        if cls.got is None:
            module = _accel.load()
            if module is None:
                cls.got = (_delete_versioned, _delete_legacy,
                           ctypes.cast(_DESTROY, ctypes.c_void_p).value or 0)
            else:
                deleter, destroy = module.dlpack_setup(finalizer(_release), _capsule_destructor)
                cls.got = (_cast(_T_VERSIONED_DELETER, deleter),
                           _cast(_T_LEGACY_DELETER, deleter), destroy)
        return cls.got


def describe_entries() -> str:
    """Which deleter and capsule destructor capsules carry, for offload-info."""
    if _Entries.get()[0] is _delete_versioned:
        return ("Python callbacks (no compiled module: an exception that a consumer's "
                "deallocation runs them under is lost)")
    return "C entries that keep a propagating exception (offload/accel_c/dlpack.c)"


_T_VERSIONED_DELETER = _ffi.typeof("void(*)(DLManagedTensorVersioned *)")
_T_LEGACY_DELETER = _ffi.typeof("void(*)(DLManagedTensor *)")


def _dl_dtype(dtype: np.dtype) -> tuple[int, int, int]:
    code = _DTYPE_CODES.get(dtype.kind)
    if code is None or dtype.fields is not None:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"DLPack has no type for numpy dtype {dtype}")
    return code, dtype.itemsize * 8, 1


class Layout:
    """A DLTensor filled once (data, device, shape, strides, dtype), copied into every
    capsule made from it; owns the shape and stride arrays the capsules point to."""

    __slots__ = ("shape_c", "strides_c", "tensor")

    def __init__(self, data: int, device: tuple[int, int], shape: tuple[int, ...],
                 strides: tuple[int, ...] | None, dtype: np.dtype):
        self.shape_c = _ffi.new("int64_t[]", list(shape) or [0])
        self.strides_c = _ffi.new("int64_t[]", list(strides)) if strides else _ffi.NULL
        t = self.tensor = _ffi.new("DLTensor *")
        t.data = _ffi.cast("void *", data)
        t.device.device_type, t.device.device_id = device
        t.ndim = len(shape)
        t.dtype.code, t.dtype.bits, t.dtype.lanes = _dl_dtype(dtype)
        t.shape = self.shape_c
        t.strides = self.strides_c
        t.byte_offset = 0


@defers_interrupts
def capsule(layout: Layout, read_only: bool, owner: Any, versioned: bool) -> Any:
    """A DLPack capsule of `layout`'s tensor (the memory kept alive through `owner`).
    (A Ctrl-C here waits for the next operation: the destructor of a capsule dropped as
    the KeyboardInterrupt leaves would lose it.)"""
    delete_versioned, delete_legacy, destroy = _Entries.get()
    if versioned:
        managed = _ffi.new(_T_VERSIONED)
        managed.version.major = 1
        managed.flags = _READ_ONLY if read_only else 0
        managed.deleter = delete_versioned
    else:
        managed = _ffi.new(_T_LEGACY)
        managed.deleter = delete_legacy
    managed.dl_tensor = layout.tensor[0]
    address = int(_cast(_T_UINTPTR, managed))
    with _alive_lock:
        _alive[address] = (managed, layout, owner)
    return _capsule_new(address, _VERSIONED if versioned else _LEGACY, destroy)


def make_capsule(data: int, device: tuple[int, int], shape: tuple[int, ...],
                 strides: tuple[int, ...] | None, dtype: np.dtype, read_only: bool,
                 owner: Any, versioned: bool) -> Any:
    """A DLPack capsule for memory at `data` (kept alive through `owner`)."""
    return capsule(Layout(data, device, shape, strides, dtype), read_only, owner, versioned)


# the functions that wait for a foreign stream (a live CUDA plugin registers one); bound
# methods are held weakly, so a plugin nobody uses any more drops out by itself
_stream_waiters: list[Any] = []


def _ref(fn: Callable[[int], None]) -> Any:
    return weakref.WeakMethod(fn) if isinstance(fn, types.MethodType) else (lambda: fn)


def register_stream_waiter(fn: Callable[[int], None]) -> None:
    """Let `foreign_pointer` wait on a producer's stream through `fn(stream)`."""
    if all(r() != fn for r in _stream_waiters):
        _stream_waiters.append(_ref(fn))


def unregister_stream_waiter(fn: Callable[[int], None]) -> None:
    _stream_waiters[:] = [r for r in _stream_waiters if r() is not None and r() != fn]


def _wait_producer(stream: int | None) -> None:
    if stream is not None:
        for r in list(_stream_waiters):
            fn = r()
            if fn is not None:
                fn(stream)


_BUILTIN_HOST = (int, float, bool, bytes, bytearray, memoryview)


def _host_data(obj: Any) -> bool:
    """Host data for certain (numpy is looked at only past the built-in types: a C
    program passes ints, and its library's interpreter loads numpy on first need)."""
    return obj is None or isinstance(obj, _BUILTIN_HOST) or \
        isinstance(obj, (np.ndarray, np.generic))


def is_foreign(obj: Any) -> bool:
    """Whether `obj` is a foreign device array (CUDA Array Interface, or DLPack on a GPU),
    or offload's own device_array (`__offload_device_pointer__`, on any plugin)."""
    if _host_data(obj):
        return False
    if hasattr(type(obj), "__offload_device_pointer__") or \
            hasattr(type(obj), "__cuda_array_interface__"):
        return True
    try:
        return obj.__dlpack_device__()[0] in (KDL_CUDA, KDL_ROCM)
    except (AttributeError, TypeError, ValueError, IndexError):
        return False


def _dense(dims: Any, itemsize: int) -> bool:
    expect = itemsize
    for n, stride in dims:
        if n != 1 and stride != expect:
            return False
        expect *= n
    return True


def _refuse_gaps(obj: Any, shape: tuple[int, ...], strides: tuple[int, ...] | None,
                 itemsize: int) -> None:
    """A foreign device array is one block of math.prod(shape) elements, C- or
    Fortran-ordered, as a host array must be (arrays.as_array): OffloadError naming its
    strides (bytes) otherwise; a dimension of one element, or an empty array, takes any
    stride."""
    if strides is None or 0 in shape:
        return
    if len(strides) != len(shape):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{type(obj).__name__}: {len(strides)} strides {strides} for "
                           f"{len(shape)} dimensions {shape}")
    dims = list(zip(shape, strides, strict=True))
    if not (_dense(reversed(dims), itemsize) or _dense(dims, itemsize)):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{type(obj).__name__}: cannot use a non-contiguous device array "
                           f"(shape {shape}, strides {strides} bytes) as one block; pass a "
                           f"contiguous copy")


class ForeignPointer(NamedTuple):
    """Where a foreign device array's one block lies, and whether its producer marked it
    read-only (the interface's `data[1]`, DLPack's READ_ONLY flag)."""

    address: int
    nbytes: int
    read_only: bool


def foreign_pointer(obj: Any) -> ForeignPointer | None:
    """The device block of a foreign device array (CUDA Array Interface v3, or DLPack on
    a CUDA/ROCm device), else None. Work the producer queued on the stream it names has
    finished when this returns; the pointer is valid while `obj` lives."""
    if _host_data(obj):
        return None
    own = getattr(type(obj), "__offload_device_pointer__", None)
    if own is not None:              # offload's own device_array, on any plugin
        return own(obj)  # type: ignore[no-any-return]
    if hasattr(type(obj), "__cuda_array_interface__"):
        desc = obj.__cuda_array_interface__
        nbytes = math.prod(desc["shape"]) * np.dtype(desc["typestr"]).itemsize
        stream = desc.get("stream")
        if stream == 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"{type(obj).__name__}.__cuda_array_interface__: stream 0 is "
                               f"disallowed by the interface (1 or 2 name the default streams)")
        if desc.get("mask") is not None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"{type(obj).__name__}.__cuda_array_interface__: a masked "
                               f"array (mask {desc['mask']!r}) is not one block of values")
        _refuse_gaps(obj, tuple(desc["shape"]), desc.get("strides"),
                     np.dtype(desc["typestr"]).itemsize)
        _wait_producer(int(stream) if stream is not None else None)
        return ForeignPointer(int(desc["data"][0] or 0), nbytes, bool(desc["data"][1]))
    if hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        kind, _ = obj.__dlpack_device__()
        if kind not in (KDL_CUDA, KDL_ROCM):
            return None
        stream = 1 if kind == KDL_CUDA else None      # the legacy default stream
        try:                                            # 1.x: with its read-only flag
            capsule = obj.__dlpack__(stream=stream, max_version=(1, 0))
        except TypeError:                               # a producer before max_version
            try:
                capsule = obj.__dlpack__(stream=stream)
            except TypeError:                           # a producer without the argument
                capsule, stream = obj.__dlpack__(), None
        read_only = False                               # (0.x tensors have no flags)
        if _is_valid_obj(capsule, _VERSIONED):
            managed = _ffi.cast("DLManagedTensorVersioned *",
                                _get_pointer_obj(capsule, _VERSIONED))
            t, read_only = managed.dl_tensor, bool(managed.flags & _READ_ONLY)
        else:
            t = _ffi.cast("DLManagedTensor *", _get_pointer_obj(capsule, _LEGACY)).dl_tensor
        itemsize = t.dtype.bits * t.dtype.lanes // 8
        shape = tuple(t.shape[i] for i in range(t.ndim))
        nbytes = math.prod(shape) * itemsize
        _refuse_gaps(obj, shape, None if t.strides == _ffi.NULL else
                     tuple(t.strides[i] * itemsize for i in range(t.ndim)), itemsize)
        address = int(_ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)
        _wait_producer(stream)
        # the unconsumed capsule frees its tensor: obj owns the data
        return ForeignPointer(address, nbytes, read_only)
    return None
