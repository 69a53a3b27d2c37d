"""The compiled mapping core and its loader: TableCore and HostDataToTarget in C (the
twins of offload/mapping/core.py and offload/entries.py), and the fewer-steps paths that
work on them (MappingTable.begin_single_range/end_single_range on host memory, updates and
launches on mapped data).

A CPython extension (offload/accel_c/accel.c and the parts it includes) built once per
Python and source into offload's cache with the C compiler, loaded from an anonymous memory
file like compile_c's images. Its calls take the single-range cases and call the Python
methods for every other case, having changed nothing. Without a compiler or Python's
headers (or with OFFLOAD_ACCEL=0, or on a free-threaded Python, whose GIL-free threads it
does not expect) tables use the pure-Python twins: the same results, slower.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import config as _config
from . import locks
from .compiler import _read_own, _run, cache_directory
from .errors import OffloadError

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accel_c")
MAIN = "accel.c"               # includes the other .c files of SOURCES
LIMIT = 1 << 16          # bytes copied under the table lock at most; larger: outside it

_lock = locks.new_lock()
_loaded: list[ModuleType | None] = []          # [module or None], once per process
_why: list[str] = []                           # why it is None, once known
_fds: list[int] = []                           # memfds of loaded modules, kept open


def _build() -> ModuleType | None:
    cache_dir, cc = _config.tools()
    include = sysconfig.get_paths()["include"]
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        _why.append("a free-threaded Python")
        return None
    if not os.path.exists(os.path.join(include, "Python.h")):
        _why.append(f"no Python headers ({include}/Python.h)")
        return None
    parts = []
    for name in sorted(os.listdir(SOURCES)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(SOURCES, name), "rb") as f:
                parts += [name.encode(), f.read()]
    key = hashlib.sha256(b"\0".join((*parts, sys.version.encode(), include.encode(),
                                     str(sysconfig.get_config_var("EXT_SUFFIX")).encode()))
                         ).hexdigest()[:40]
    directory = cache_directory(cache_dir)
    out = os.path.join(directory, f"accel-{key}.so")
    data = _read_own(out)
    if data is None:
        import tempfile  # (here: not at a C program's start)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"accel-{key}.", suffix=".so.tmp")
        os.close(fd)
        try:
            _run([cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", f"-I{include}",
                  f"-I{SOURCES}", os.path.join(SOURCES, MAIN), "-o", tmp],
                 "building the accelerator")
            data = _read_own(tmp)
            if data is None:
                _why.append(f"the built module {tmp} could not be read back")
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
                module = _build()
                if module is not None:
                    locks.attach(module)
                _loaded.append(module)
            except (OffloadError, OSError, ImportError) as exc:
                _why.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                _loaded.append(None)
        return _loaded[0]


def describe(config: _config.Config) -> str:
    """Which mapping core runs, for offload-info: the compiled one, or the pure-Python
    twin and why."""
    if not config.accel:
        return "pure Python (OFFLOAD_ACCEL=0)"
    if load() is None:
        return f"pure Python (the compiled core was not built: {', '.join(_why) or 'unknown'})"
    return f"compiled ({MAIN} and the files beside it, cached in {config.cache_dir or 'the cache'})"


def new_lock(config: _config.Config) -> Any:
    """A lock for a table or a device: the extension's Lock (threading.Lock's interface,
    taken by the C paths directly), or offload.locks.Lock without it; both count steps."""
    module = load() if config.accel else None
    return locks.Lock() if module is None else module.Lock()


def table_core_type(config: _config.Config, twin: type, twin_entry: type) -> type:
    """The TableCore a table of this configuration uses: the compiled one (its entries
    the compiled HostDataToTarget), or `twin` without the extension or with
    OFFLOAD_ACCEL=0. A compiled core whose entry fields differ from `twin_entry`'s
    __slots__ is refused with a TypeError (it would make entries lacking a field)."""
    module = load() if config.accel else None
    if module is None:
        return twin
    ours, theirs = tuple(module.ENTRY_FIELDS), tuple(getattr(twin_entry, "__slots__", ()))
    if ours != theirs:
        raise TypeError(f"HostDataToTarget has the fields {theirs} where the compiled mapping "
                        f"core knows {ours}: the two cores disagree on the entry layout "
                        f"(offload/entries.py and offload/accel_c/table.c)")
    return module.TableCore  # type: ignore[no-any-return]


def single_range_function(config: _config.Config, ndarray: type, not_single_range: int,
                   python: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """MapClause.single_range (`python`) in C, as a function of the clause, or None without the
    extension or with OFFLOAD_ACCEL=0."""
    module = load() if config.accel else None
    if module is None:
        return None
    module.single_range_setup(ndarray, not_single_range, python)
    return module.single_range  # type: ignore[no-any-return]


def accelerate(table: Any, core: Any, dev: Any, kind: Any,
               begin_py: Callable[..., Any], end_py: Callable[..., Any],
               release_py: Callable[..., Any], update_py: Callable[..., Any]
               ) -> Any:
    """The compiled core's `CompiledSteps` for `table` (begin_single_range,
    end_single_range, update_single_range, present, launch_present, release,
    update_arrays, present_map, launch_present_map, call_present_map), whose state
    `core` (a compiled TableCore) owns: a field is None where the Python method stays;
    None for all. present/launch_present/release: a region on mapped data and
    release_busy for the entries it marked (target.py); present_map, launch_present_map
    and call_present_map: the same for a C-ABI kernel region's map arrays
    (capi/kernels.py); update_arrays: target_update of one whole array (api.py). The C
    calls fall back to `begin_py`, `end_py`, `update_py` (the Python methods) for what
    they do not take; `release_py` frees an entry the pool does not take back after an
    unlocked copy.
    begin/end: on host memory, with synchronous copies and no pinning of mapped buffers;
    update: where the device gives a copier (GenericDevice.accel_copier). None with
    OFFLOAD_ACCEL=0 or without the extension."""
    plugin = table.plugin
    config = plugin.config
    if not config.accel:
        return None
    plain = bool(getattr(dev, "host_memory", False)) and not plugin.asynchronous and \
        config.lock_mapped is _config.LockMapped.OFF
    module = load()
    if module is None or not isinstance(core, module.TableCore):
        return None
    copier = dev.accel_copier()
    if not plain and copier is None:
        return None
    got = module.accelerate(table, core, dev, plugin, kind, locks.Latch, begin_py, end_py,
                            release_py, update_py, LIMIT,
                            (plugin.staging_from(True), plugin.staging_from(False)), copier)
    return module.CompiledSteps((
        got.begin_single_range if plain else None, got.end_single_range if plain else None,
        got.update_single_range if copier is not None else None, got.present,
        got.launch_present, got.release, got.update_arrays if copier is not None else None,
        got.present_map, got.launch_present_map, got.call_present_map))
