"""Synchronous CUDA operations in one call: make the context current, enqueue a copy or a
kernel, spin on the stream until it is done (the GIL released throughout).

A small C helper, compiled once per compiler into offload's cache (like compile_c), calls
the driver through function pointers taken from the driver library offload already
loaded, so it links against nothing. Without a C compiler the plugin keeps its Python
path (`load` returns None); results are the same, only slower."""
from __future__ import annotations

import threading
from typing import Any

import cffi

from ..compiler import compile_c
from ..errors import OffloadError
from ._libc import dlopen_bytes

SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int (*set_ctx_t)(void *);
typedef int (*copy_t)(uintptr_t, uintptr_t, size_t, void *);
typedef int (*query_t)(void *);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);

#define NOT_READY 600                     /* CUDA_ERROR_NOT_READY */

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Poll query(stream) until it is not NOT_READY, for at most `spin` seconds. */
static int spin_on(query_t query, void *stream, double spin) {
  int rc = query(stream);
  if (rc != NOT_READY)
    return rc;
  double until = seconds() + spin;
  while ((rc = query(stream)) == NOT_READY && seconds() < until)
    ;
  return rc;
}

/* copy(dst, src, size, stream) (cuMemcpyHtoDAsync or cuMemcpyDtoHAsync), then wait.
   Returns the first error, or NOT_READY when the copy outlasts the spin. */
int offload_copy_wait(void *set_ctx, void *ctx, void *copy, uintptr_t dst, uintptr_t src,
                      size_t size, void *query, void *stream, double spin) {
  int rc = ((set_ctx_t)set_ctx)(ctx);
  if (rc == 0)
    rc = ((copy_t)copy)(dst, src, size, stream);
  return rc ? rc : spin_on((query_t)query, stream, spin);
}

/* cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared, stream, params, NULL), then wait. */
int offload_launch_wait(void *set_ctx, void *ctx, void *launch, void *fn, unsigned grid,
                        unsigned block, unsigned shared, void *stream, void **params,
                        void *query, double spin) {
  int rc = ((set_ctx_t)set_ctx)(ctx);
  if (rc == 0)
    rc = ((launch_t)launch)(fn, grid, 1, 1, block, 1, 1, shared, stream, params, NULL);
  return rc ? rc : spin_on((query_t)query, stream, spin);
}
"""

CDEF = """
int offload_copy_wait(void *, void *, void *, uintptr_t, uintptr_t, size_t, void *, void *,
                      double);
int offload_launch_wait(void *, void *, void *, void *, unsigned, unsigned, unsigned, void *,
                        void **, void *, double);
"""

_ffi = cffi.FFI()
_ffi.cdef(CDEF)
_lock = threading.Lock()
_loaded: list[Any] = []          # [library or None], once per process


def load() -> Any:
    """The helper library (cffi, functions `offload_copy_wait`, `offload_launch_wait`),
    or None when it cannot be built here (no C compiler, unusable cache)."""
    with _lock:
        if not _loaded:
            try:
                binary = compile_c(SOURCE).binaries[0]
                _loaded.append(dlopen_bytes(_ffi, binary.data, "cuda-fast",
                                            "the CUDA wait helper"))
            except (OffloadError, OSError):
                _loaded.append(None)
        return _loaded[0]


class Fast:
    """The helper's two calls and the driver entry points they take, as cdata ready to
    pass (no conversion per call)."""

    __slots__ = ("copy_wait", "launch_wait", "set_ctx", "h2d", "d2h", "query", "launch")

    def __init__(self, helper: Any, drv_ffi: cffi.FFI, drv_lib: Any):
        self.copy_wait = helper.offload_copy_wait
        self.launch_wait = helper.offload_launch_wait

        def entry(name: str) -> Any:
            return drv_ffi.cast("void *", drv_ffi.addressof(drv_lib, name))
        self.set_ctx = entry("cuCtxSetCurrent")
        self.h2d = entry("cuMemcpyHtoDAsync_v2")
        self.d2h = entry("cuMemcpyDtoHAsync_v2")
        self.query = entry("cuStreamQuery")
        self.launch = entry("cuLaunchKernel")


def fast_calls(drv_ffi: cffi.FFI, drv_lib: Any) -> Fast | None:
    """The helper bound to a loaded driver library, or None without the helper."""
    helper = load()
    return None if helper is None else Fast(helper, drv_ffi, drv_lib)
