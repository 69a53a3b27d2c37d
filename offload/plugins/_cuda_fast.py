"""Synchronous CUDA operations in one call: make the context current, enqueue a copy or a
kernel, spin on the stream until it is done (the GIL released throughout).

A small C helper (accel_c/cuda_work.c, the one C unit of "enqueue then spin" that the
accelerator also includes, then plugins/cuda_fast.c), compiled once per compiler into
offload's cache (like compile_c), calls the driver through function pointers taken from
the driver library offload already loaded, so it links against nothing. Without a C
compiler the plugin keeps its Python path (`load` returns None); results are the same,
only slower."""
from __future__ import annotations

import functools
import os
from typing import Any

import cffi

from .. import locks
from ..compiler import compile_c
from ..errors import OffloadError
from ._libc import dlopen_bytes

_HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = (os.path.join(_HERE, os.pardir, "accel_c", "cuda_work.c"),   # the shared C unit
         os.path.join(_HERE, "cuda_fast.c"))                          # its two exports


def source() -> str:
    """The helper's C source: the shared unit of "enqueue then spin", then the exports."""
    texts = []
    for part in PARTS:
        with open(part, encoding="utf-8") as f:
            texts.append(f.read())
    return "\n".join(texts)


CDEF = """
int offload_copy_wait(void *, void *, void *, uintptr_t, uintptr_t, size_t, void *, void *,
                      double);
int offload_launch_wait(void *, void *, void *, void *, unsigned, unsigned, unsigned, void *,
                        void **, void *, double);
int offload_query_spin(void *, void *, double);
"""

_ffi = cffi.FFI()
_ffi.cdef(CDEF)
_lock = locks.new_lock()
_loaded: list[Any] = []          # [library or None], once per process


def load() -> Any:
    """The helper library (cffi, functions `offload_copy_wait`, `offload_launch_wait`),
    or None when it cannot be built here (no C compiler, unusable cache)."""
    with _lock:
        if not _loaded:
            try:
                binary = compile_c(source()).binaries[0]
                _loaded.append(dlopen_bytes(_ffi, binary.data, "cuda-fast",
                                            "the CUDA wait helper"))
            except (OffloadError, OSError):
                _loaded.append(None)
        return _loaded[0]


class Fast:
    """The helper's calls and the driver entry points they take, as cdata ready to pass
    (no conversion per call); `spin_stream` / `spin_event`: the wait policy's spin
    (waits.poll) of a stream or an event, one call without the GIL."""

    __slots__ = ("copy_wait", "launch_wait", "set_ctx", "h2d", "d2h", "query", "launch",
                 "memset", "spin_stream", "spin_event")

    def __init__(self, helper: Any, drv_ffi: cffi.FFI, drv_lib: Any):
        self.copy_wait = helper.offload_copy_wait
        self.launch_wait = helper.offload_launch_wait
        spin = helper.offload_query_spin

        def entry(name: str) -> Any:
            return drv_ffi.cast("void *", drv_ffi.addressof(drv_lib, name))
        self.set_ctx = entry("cuCtxSetCurrent")
        self.h2d = entry("cuMemcpyHtoDAsync_v2")
        self.d2h = entry("cuMemcpyDtoHAsync_v2")
        self.query = entry("cuStreamQuery")
        self.launch = entry("cuLaunchKernel")
        self.memset = entry("cuMemsetD8Async")
        self.spin_stream = functools.partial(spin, self.query)
        self.spin_event = functools.partial(spin, entry("cuEventQuery"))


def fast_calls(drv_ffi: cffi.FFI, drv_lib: Any) -> Fast | None:
    """The helper bound to a loaded driver library, or None without the helper."""
    helper = load()
    return None if helper is None else Fast(helper, drv_ffi, drv_lib)
