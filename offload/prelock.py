"""Prelocking (LLVM's llvm_omp_target_lock_mem, review D139208): `lock` / `locked` pin an
array's pages for a device, and every later map of that memory copies straight from it."""
from __future__ import annotations

import os
from typing import Any

from . import locks
from ._lazy import numpy as np
from .arrays import as_array, span
from .device import Device
from .dlpack import KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST, make_capsule
from .errors import ErrorCode, OffloadError
from .interrupts import defers_interrupts
from .runtime import current as _current
from .runtime import release_operation, resource_operation


# ---- pinning ----------------------------------------------------------------------
class Pinned:
    """One lock reference on an array's memory; `unlock()` gives it back once.

    `device_address` is where the device reaches the memory. Also a context manager."""

    def __init__(self, array: Any, dev: Device, host: int, size: int, device_address: int):
        self.array = array
        self.device = dev.number
        self.host = host
        self.size = size
        self.device_address = device_address
        self._dev = dev
        self._runtime = _current()         # the runtime that holds the pin
        self._pid = os.getpid()             # in a forked child the handle is inert
        self._lock = locks.new_lock()
        self._locked = True

    @property
    def locked(self) -> bool:
        """Whether this handle still holds its reference."""
        return self._locked

    @release_operation
    def unlock(self) -> None:
        """Give the reference back; raises INVALID_ARGUMENT when already given back. In a
        forked child (which starts with an empty runtime) a quiet no-op."""
        if os.getpid() != self._pid:
            self._locked = False
            return
        with self._lock:
            if not self._locked:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"already unlocked: 0x{self.host:x} ({self.size} bytes) "
                                   f"on device {self.device}")
            self._locked = False
        rt = self._runtime
        if rt.is_shut or rt.closing:       # torn down (or going): the pin goes with it
            return
        try:
            self._dev.unlock(self.host)
        except OffloadError as exc:
            if exc.code is not ErrorCode.UNINITIALIZED:
                raise                      # shutting down meanwhile: the pin goes with it

    def __dlpack_device__(self) -> tuple[int, int]:
        """kDLCUDAHost / kDLROCMHost when pinned for a GPU; kDLCPU on the host plugin."""
        kind = {"cuda": KDL_CUDA_HOST, "amdgpu": KDL_ROCM_HOST}.get(self._dev.plugin.name,
                                                                    KDL_CPU)
        return kind, 0

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """The pinned host memory as a DLPack capsule (no copy), for consumers that
        recognise page-locked memory (e.g. torch.from_dlpack)."""
        if copy:
            raise OffloadError(ErrorCode.UNSUPPORTED, "Pinned exports without copies")
        arr = self.array if isinstance(self.array, np.ndarray) else \
            np.frombuffer(memoryview(self.array).cast("B"), dtype=np.uint8)
        strides = None if arr.flags.c_contiguous else \
            tuple(st // arr.dtype.itemsize for st in arr.strides)
        return make_capsule(self.host, self.__dlpack_device__(), arr.shape, strides, arr.dtype,
                            not arr.flags.writeable, self,
                            max_version is not None and max_version[0] >= 1)

    @defers_interrupts           # the caller holds the pin already: the block owns it
    def __enter__(self) -> Pinned:
        return self

    @release_operation
    def __exit__(self, *exc: Any) -> None:
        if self._locked:
            self.unlock()

    def __repr__(self) -> str:
        state = "locked" if self._locked else "unlocked"
        return (f"<Pinned 0x{self.host:x} ({self.size} bytes) -> 0x{self.device_address:x} on "
                f"device {self.device}, {state}>")


@resource_operation(lambda pin, *_, **__: pin.unlock())
def lock(a: Any, device: int | None = None) -> Pinned:
    """Pin an array's memory for a device (`llvm_omp_target_lock_mem`, reference counted).

    Later mappings of the memory copy from the pinned pages directly.

    Args:
        a: a contiguous numpy array or buffer, at least one byte.
        device: device number; None for the default device.

    Returns:
        A Pinned holding one reference; `unlock()` it (or use `locked`).

    Raises:
        OffloadError: INVALID_VALUE for the initial device or an empty array,
            INVALID_ARGUMENT for a range that partly overlaps a pinned one,
            OUT_OF_RESOURCES when the OS refuses (the message names the limit).

    Example:
        >>> pin = offload.lock(a, device=0); ...; pin.unlock()
    """
    dev = _current().device(device)
    if dev is None:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           "cannot lock memory for the initial device; pass a device number "
                           "(see offload.devices())")
    arr = as_array(a, "lock")
    p, n = span(arr)
    addr = dev.lock(p, n, owner=arr, read_only=not arr.flags.writeable)
    return Pinned(arr, dev, p, n, addr)


class locked:  # noqa: N801 - a function's name, as contextlib's
    """`with locked(a) as pin:` pins for the block and unpins on exit; arguments as
    `lock`. The memory is pinned as the block is entered (a Ctrl-C as `locked(a)`
    returns leaves nothing pinned); `pin` is the Pinned.

    Example:
        >>> with offload.locked(a, device=0):
        ...     offload.target(k.add_one, a, 0, a.size, map=[offload.tofrom(a)])
    """

    def __init__(self, a: Any, device: int | None = None):
        self._args = (a, device)
        self._pins: list[Pinned] = []            # innermost last: entered again, nests

    @resource_operation(lambda pin, self: self.__exit__(KeyboardInterrupt, None, None))
    def __enter__(self) -> Pinned:
        pin = lock(*self._args)
        self._pins.append(pin)
        return pin

    @release_operation
    def __exit__(self, *exc: Any) -> None:
        if self._pins:
            pin = self._pins.pop()
            if pin.locked:
                pin.unlock()
