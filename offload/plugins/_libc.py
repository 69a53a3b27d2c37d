"""The C library calls every plugin may use, typed for integer addresses."""
from __future__ import annotations

import cffi

# memmove typed with integer addresses: the same calling convention as pointers on
# the LP64 ABIs we run on, and no cdata casts on the hot path
_ffi = cffi.FFI()
_ffi.cdef("void *memmove(uintptr_t, uintptr_t, size_t); void *memset(uintptr_t, int, size_t);")
_libc = _ffi.dlopen(None)


def memmove(dst: int, src: int, size: int) -> None:
    """memmove between two integer host addresses (the GIL is released)."""
    _libc.memmove(dst, src, size)


def memset(dst: int, value: int, size: int) -> None:
    """memset of an integer host address (the GIL is released)."""
    _libc.memset(dst, value, size)
