"""The accelerator: MappingTable.begin_plain/end_plain in C for devices whose memory is
host memory (the host plugin).

A CPython extension (offload/_accel.c) built once per Python and source into offload's
cache with the C compiler, loaded from an anonymous memory file like compile_c's images.
Its two calls work on the Python table's own structures and call the Python methods for
every case that is not the plain one, having changed nothing; the Python code stays the
owner of the rules. Without a compiler or Python's headers (or with OFFLOAD_ACCEL=0, or on
a free-threaded Python, whose GIL-free threads it does not expect) tables keep the Python
methods: the same results, slower.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import config as _config
from .compiler import _read_own, _run, cache_directory
from .errors import OffloadError

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_accel.c")
LIMIT = 1 << 16          # bytes copied under the table lock at most; larger: outside it

_lock = threading.Lock()
_loaded: list[ModuleType | None] = []          # [module or None], once per process
_fds: list[int] = []                           # memfds of loaded modules, kept open


def _build() -> ModuleType | None:
    cfg = _config.read()
    include = sysconfig.get_paths()["include"]
    if sysconfig.get_config_var("Py_GIL_DISABLED") or \
            not os.path.exists(os.path.join(include, "Python.h")):
        return None
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(b"\0".join((source, sys.version.encode(), include.encode(),
                                     str(sysconfig.get_config_var("EXT_SUFFIX")).encode()))
                         ).hexdigest()[:40]
    directory = cache_directory(cfg.cache_dir)
    out = os.path.join(directory, f"accel-{key}.so")
    data = _read_own(out)
    if data is None:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"accel-{key}.", suffix=".so.tmp")
        os.close(fd)
        try:
            _run([cfg.cc, "-shared", "-fPIC", "-O2", f"-I{include}", SOURCE, "-o", tmp],
                 "building the accelerator")
            data = _read_own(tmp)
            if data is None:
                return None
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    fd = os.memfd_create("offload-accel", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        path = f"/proc/self/fd/{fd}"
        loader = importlib.machinery.ExtensionFileLoader("offload._accel_c", path)
        spec = importlib.util.spec_from_file_location("offload._accel_c", path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
    except BaseException:
        os.close(fd)
        raise
    _fds.append(fd)
    return module


def load() -> ModuleType | None:
    """The extension module, or None when it cannot be built here."""
    with _lock:
        if not _loaded:
            try:
                _loaded.append(_build())
            except (OffloadError, OSError, ImportError):
                _loaded.append(None)
        return _loaded[0]


def plain_function(config: _config.Config, ndarray: type, not_plain: int,
                   python: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """MapClause.plain (`python`) in C, as a function of the clause, or None without the
    extension or with OFFLOAD_ACCEL=0."""
    module = load() if config.accel else None
    if module is None:
        return None
    module.plain_setup(ndarray, not_plain, python)
    return module.plain  # type: ignore[no-any-return]


def accelerate(table: Any, dev: Any, entry_type: type, kind: Any,
               begin_py: Callable[..., Any], end_py: Callable[..., Any],
               release_py: Callable[..., Any]
               ) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """C begin_plain/end_plain for `table` (falling back to `begin_py`/`end_py`, the
    Python methods; `release_py` frees an entry whose last copy back ran unlocked), or None: not host memory, a plugin whose copies are asynchronous or
    that pins mapped buffers, OFFLOAD_ACCEL=0, or no extension."""
    plugin = table.plugin
    if not getattr(dev, "host_memory", False) or not plugin.config.accel or \
            plugin.asynchronous or plugin.config.lock_mapped is not _config.LockMapped.OFF:
        return None
    module = load()
    if module is None:
        return None
    return module.accelerate(table, dev, plugin, entry_type, kind, threading.Lock, begin_py,
                             end_py, release_py, LIMIT, plugin.staging_threshold)
