"""The C library calls every plugin may use, typed for integer addresses."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cffi

# memmove typed with integer addresses: the same calling convention as pointers on
# the LP64 ABIs we run on, and no cdata casts on the hot path
_ffi = cffi.FFI()
_ffi.cdef("void *memmove(uintptr_t, uintptr_t, size_t); void *memset(uintptr_t, int, size_t);")
_libc = _ffi.dlopen(None)


#: memmove(dst, src, size) between integer host addresses (the GIL is released); the
#: cffi function itself, no Python frame around it
memmove: Callable[[int, int, int], Any] = _libc.memmove
#: memset(dst, value, size) of an integer host address (the GIL is released)
memset: Callable[[int, int, int], Any] = _libc.memset
