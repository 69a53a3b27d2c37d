"""cffi declarations parsed once per machine, not once per process: `ffi_for(name, cdef)`
gives an FFI for `cdef` from a module cffi wrote for it (out-of-line ABI mode, kept in
the cache directory by a hash of the declarations), whose import needs no C parser. A
process then starts without pycparser (a C program's library included); the first one
writes the module, and where the cache cannot be written the declarations are parsed
in the process as before."""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
from typing import Any

import _cffi_backend

from .cache_dir import cache_directory, default_root
from .errors import OffloadError


def _directory() -> str:
    """The cache's ffi/ directory, private as every cache is (cache_dir.py's rule;
    OffloadError where it is not)."""
    return cache_directory(os.path.join(cache_directory(default_root()), "ffi"))


def _parsed(cdef: str) -> Any:
    import cffi
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi


def module_name(name: str, cdef: str) -> str:
    """The cache's module for `cdef` (keyed by the declarations and cffi's version)."""
    key = hashlib.sha256(f"{_cffi_backend.__version__}\0{cdef}".encode()).hexdigest()[:24]
    return f"_offload_ffi_{name}_{key}"


def ffi_for(name: str, cdef: str) -> Any:
    """An FFI declaring `cdef` (`name` names it in the cache): cast, new, typeof, string,
    callback, from_buffer and dlopen as cffi.FFI's; no further cdef."""
    module = module_name(name, cdef)
    try:
        directory = _directory()
    except OffloadError:                    # no private cache: parse in the process (the
        return _parsed(cdef)                # compile cache says why, when it is used)
    path = os.path.join(directory, module + ".py")
    if not os.path.isfile(path):
        try:
            _write(module, cdef, directory, path)
        except OSError:
            return _parsed(cdef)
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        return _parsed(cdef)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        return mod.ffi
    except Exception as exc:                # noqa: BLE001 - a damaged file: parse, say so
        sys.stderr.write(f"offload: ignoring the damaged cffi cache file {path} ({exc})\n")
        return _parsed(cdef)


def _write(module: str, cdef: str, directory: str, path: str) -> None:
    import tempfile  # (here: not at a C program's start)

    import cffi
    from cffi.recompiler import make_py_source  # emit_python_code, without its print
    os.makedirs(directory, exist_ok=True)
    builder = cffi.FFI()
    builder.cdef(cdef)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=module, suffix=".tmp")
    os.close(fd)
    try:
        make_py_source(builder, module, tmp)
        os.replace(tmp, path)               # whole, or not there: another process may read
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
