"""The host plugin's libc: allocation, mmap, dlopen and mlock through cffi, and page-
counted locking (pages two pinned entries share stay locked while either needs them)."""
from __future__ import annotations

import os
import resource

from .. import locks
from ..errors import ErrorCode, OffloadError
from ..ffi_cache import ffi_for

_ffi = ffi_for("host_memory", """
    void *malloc(size_t);
    void free(void *);
    int posix_memalign(void **, size_t, size_t);
    int mlock(uintptr_t, size_t);
    int munlock(uintptr_t, size_t);
    char *strerror(int);
    void *dlopen(const char *filename, int flags);
    void *dlsym(void *handle, const char *symbol);
    char *dlerror(void);
    void *mmap(uintptr_t addr, size_t length, int prot, int flags, int fd, long offset);
    int munmap(uintptr_t addr, size_t length);
""")
_libc = _ffi.dlopen(None)
# mmap: PROT_READ|PROT_WRITE; MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE, and
# MAP_FIXED_NOREPLACE (Linux 4.17) for an address asked for
_PROT_RW, _MAP_ANON_PRIVATE, _MAP_FIXED_NOREPLACE = 0x3, 0x22 | 0x4000, 0x100000

PAGE = os.sysconf("SC_PAGE_SIZE")

def _errno_text(err: int) -> str:
    return _ffi.string(_libc.strerror(err)).decode()


def _memlock_limit() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"


class _PageLocks:
    """mlock/munlock with counts for pages that two entries may share.

    Entries never overlap, so only an entry's first and last page can be
    shared; interior pages belong to one entry and need no count.
    """

    def __init__(self) -> None:
        self._lock = locks.new_lock()
        self._refs: dict[int, int] = {}

    @staticmethod
    def _span(host: int, size: int) -> tuple[int, int, list[int]]:
        lo = host - host % PAGE
        hi = -(-(host + size) // PAGE) * PAGE
        edges = [lo] if hi - lo == PAGE else [lo, hi - PAGE]
        return lo, hi, edges

    @staticmethod
    def _call(fn, addr: int, size: int) -> None:
        if size and fn(addr, size) != 0:
            err = _ffi.errno
            name = "mlock" if fn is _libc.mlock else "munlock"
            code = ErrorCode.OUT_OF_RESOURCES if name == "mlock" else ErrorCode.BACKEND_FAILURE
            why = " or part of the range is not mapped" if name == "mlock" and err == 12 else ""
            raise OffloadError(code, f"{name}(0x{addr:x}, {size}) failed: {_errno_text(err)} "
                                     f"(RLIMIT_MEMLOCK is {_memlock_limit()}{why})")

    def lock(self, host: int, size: int) -> None:
        lo, hi, edges = self._span(host, size)
        with self._lock:                      # counts first: a concurrent unlock of a
            for p in edges:                   # shared edge page now keeps it locked
                self._refs[p] = self._refs.get(p, 0) + 1
        try:
            self._call(_libc.mlock, lo, hi - lo)   # one call; relocking a page is harmless
        except BaseException:                      # every kind: the counts must go back
            _libc.munlock(lo + PAGE, max(0, hi - lo - 2 * PAGE))
            self._drop(edges, quiet=True)          # the mlock's failure is the one told
            raise

    def unlock(self, host: int, size: int) -> None:
        """Interior pages outside the lock; edge pages under it, only when unshared."""
        lo, hi, edges = self._span(host, size)
        self._call(_libc.munlock, lo + PAGE, max(0, hi - lo - 2 * PAGE))
        self._drop(edges)

    def _drop(self, pages: list[int], quiet: bool = False) -> None:
        """Edge pages' counts down; munlock those no entry shares any more (`quiet`: a
        rollback, whose munlock of pages the failed mlock never locked may fail)."""
        call = (lambda fn, addr, size: fn(addr, size)) if quiet else self._call
        with self._lock:
            free = []
            for p in pages:
                n = self._refs[p] - 1
                if n == 0:
                    del self._refs[p]
                    free.append(p)
                else:
                    self._refs[p] = n
            if len(free) == 2 and free[1] == free[0] + PAGE:
                call(_libc.munlock, free[0], 2 * PAGE)    # adjacent: one call
            else:
                for p in free:
                    call(_libc.munlock, p, PAGE)
