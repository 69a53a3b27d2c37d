"""Arrays born in memory a device reaches: `empty(shape, dtype, device=, kind=)` with the
semantics of LLVM's llvm_omp_target_alloc_host / _shared / _device allocators, freed
through the matching call when the last view of them dies."""
from __future__ import annotations

import ctypes
import math
import weakref
from typing import Any

from ._lazy import numpy as np
from .device import Device
from .errors import ErrorCode, OffloadError
from .interop import DeviceArray, dl_device_of
from .interrupts import finalizer
from .plugins.memory_pool import AllocKind
from .runtime import Runtime, operation, release_operation
from .runtime import current as _current

__all__ = ["empty"]

_KINDS = {"host": AllocKind.HOST, "shared": AllocKind.SHARED, "device": AllocKind.DEVICE}


def _shape(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        out = tuple(int(d) for d in dims)
        ok = all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
                 for d in dims)
    except TypeError:
        ok = False
    if not ok:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"empty: shape {shape!r} is not a tuple of non-negative integers")
    return out


@operation
def empty(shape: Any, dtype: Any = "float64", *, device: int | None = None,
          kind: str = "host", pinned: bool | None = None) -> Any:
    """An uninitialised array in memory `device` reaches.

    Args:
        shape: an int or a tuple of ints.
        dtype: a numpy dtype without Python objects.
        device: device number; None for the default device. On the initial device,
            "host" and "shared" give an ordinary numpy array.
        kind: "host" (pinned host memory the device reads directly,
            llvm_omp_target_alloc_host), "shared" (managed memory both sides use,
            llvm_omp_target_alloc_shared): a numpy array; "device" (device memory,
            llvm_omp_target_alloc_device): a DeviceArray with `.ptr`, `.nbytes` and the
            `device_array` protocols; "default" (ordinary host memory, as the default
            memory space): a numpy array.
        pinned: OpenMP's omp_atk_pinned trait, honoured (LLVM ignores its value): with
            kind="default", True page-locks the array for `device` (as
            llvm_omp_target_lock_mem) until its last view dies, so copies of it take
            the pinned path. "host" memory is pinned by nature (False is refused);
            "shared" and "device" memory cannot be (True is refused).

    Returns:
        A numpy array or a DeviceArray; its memory is freed through the matching call
        when the last view of it dies (or with the runtime, if that goes first).

    Raises:
        OffloadError: INVALID_VALUE for a bad kind, shape or dtype, or kind="device" on
            the initial device; OUT_OF_RESOURCES when the device is full.
    """
    if kind not in _KINDS and kind != "default":
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"empty: kind {kind!r}; expected 'host', 'shared', 'device' or "
                           f"'default'")
    if pinned is not None and not isinstance(pinned, bool):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"empty: pinned={pinned!r}; expected True, False or None")
    if (kind == "host" and pinned is False) or (kind in ("shared", "device") and pinned):
        always = "always" if kind == "host" else "never"
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"empty: kind={kind!r} memory is {always} pinned, so "
                           f"pinned={pinned} cannot be honoured; use "
                           f"kind='default' with pinned=True or False")
    dims = _shape(shape)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_VALUE, f"empty: {dtype!r} is not a dtype") from None
    if dt.hasobject:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"empty: dtype {dt} holds Python objects, which a device cannot use")
    rt = _current()
    dev = rt.device(device)
    if dev is None:
        if kind == "device":
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "empty: the initial device has no device memory; use "
                               "kind='host' or a device number")
        if pinned and kind == "default":
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "empty: pinned=True needs a device to pin for; the initial "
                               "device has none")
        return np.empty(dims, dt)
    if kind == "default":
        return _default(rt, dev, dims, dt, bool(pinned))
    count = math.prod(dims)
    nbytes = max(count * dt.itemsize, 1)
    addr = dev.alloc(nbytes, _KINDS[kind])
    if kind == "device":
        out = DeviceArray(addr, None, dev.number, dl_device_of(dev), dev.plugin.name,
                          shape=dims, dtype=dt)
        weakref.finalize(out, _free, rt, dev, addr, _KINDS[kind])
        return out
    buf = (ctypes.c_char * nbytes).from_address(addr)
    weakref.finalize(buf, _free, rt, dev, addr, _KINDS[kind])
    return np.frombuffer(buf, dtype=dt, count=count).reshape(dims)  # views keep buf alive


_PAGE = 4096


def _default(rt: Runtime, dev: Device, dims: tuple[int, ...], dt: np.dtype,
             pinned: bool) -> np.ndarray:
    """Ordinary host memory, page-aligned; pinned for `dev` while it lives if asked."""
    count = math.prod(dims)
    nbytes = count * dt.itemsize
    raw = np.empty(nbytes + _PAGE, np.uint8)
    start = -raw.ctypes.data % _PAGE
    out = raw[start:start + nbytes].view(dt).reshape(dims)   # views keep raw alive
    if pinned and nbytes:
        addr = raw.ctypes.data + start
        dev.lock(addr, nbytes)
        weakref.finalize(raw, _unpin, rt, dev, addr)
    return out


@finalizer                     # a Ctrl-C here waits for the next operation
def _unpin(rt: Runtime, dev: Device, addr: int) -> None:
    _give_back(rt, dev.unlock, addr)


@finalizer
def _free(rt: Runtime, dev: Device, addr: int, kind: AllocKind) -> None:
    """The matching free, unless the runtime (and the memory with it) is gone."""
    _give_back(rt, dev.free, addr, kind)


@release_operation
def _give_back(rt: Runtime, release: Any, *args: Any) -> None:
    if rt.is_shut or rt.closing:
        return
    try:
        release(*args)
    except OffloadError:
        pass                 # shut down meanwhile: it went with the runtime
