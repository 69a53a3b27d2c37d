"""The C library calls every plugin may use, typed for integer addresses."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ErrorCode, OffloadError
from ..ffi_cache import ffi_for

if TYPE_CHECKING:
    import cffi

# memmove typed with integer addresses: the same calling convention as pointers on
# the LP64 ABIs we run on, and no cdata casts on the hot path
_ffi = ffi_for("libc", "void *memmove(uintptr_t, uintptr_t, size_t); "
               "void *memset(uintptr_t, int, size_t); "
               "void *dlopen(const char *, int); char *dlerror(void);")
_libc = _ffi.dlopen(None)


#: memmove(dst, src, size) between integer host addresses (the GIL is released); the
#: cffi function itself, no Python frame around it
memmove: Callable[[int, int, int], Any] = _libc.memmove
#: memset(dst, value, size) of an integer host address (the GIL is released)
memset: Callable[[int, int, int], Any] = _libc.memset

_RTLD_NOW = 0x2
_LOADED_FDS: list[int] = []     # memfds of loaded libraries, open for the process's life


def _memfd(data: bytes, name: str) -> int:
    """An anonymous memory file holding exactly `data`."""
    fd = os.memfd_create(f"offload-{name}", getattr(os, "MFD_CLOEXEC", 0))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    return fd


def dlopen_bytes(ffi: cffi.FFI | None, data: bytes, name: str,
                 what: str = "the host image") -> Any:
    """dlopen exactly `data`: from an anonymous memory file (memfd), so no file on disk
    can be swapped between checking the bytes and loading them (and none is left behind).
    The memfd stays open while the library is loaded: the loader knows libraries by path,
    and a reused /proc/self/fd/N would name an older one. `ffi` None: the raw dlopen
    handle (for dlsym), else cffi's library object."""
    fd = _memfd(data, name)
    path = f"/proc/self/fd/{fd}"
    try:
        if ffi is not None:
            lib = ffi.dlopen(path)
        else:
            lib = _libc.dlopen(path.encode(), _RTLD_NOW)
            if lib == _ffi.NULL:
                raise OSError(_ffi.string(_libc.dlerror()).decode(errors="replace"))
    except OSError as exc:
        os.close(fd)
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"{what} does not load: {exc}") from None
    except BaseException:
        os.close(fd)
        raise
    _LOADED_FDS.append(fd)
    return lib
