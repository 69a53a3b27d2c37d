"""The C API's view of the runtime: started (in a C program) once the program's images
are registered, with the plugins those images need; LLVM device numbers resolved to
offload's devices, each with every registered image loaded and its globals mapped."""
from __future__ import annotations

import dataclasses
import os
import re
import sys
import weakref
from typing import Any

from .. import config, locks, omp, runtime
from ..errors import ErrorCode, OffloadError
from ..runtime import current
from .abi import ENTRY_INDIRECT
from .images import Program, Registry, ffi, is_link
from .maps import location

registry = Registry()
_init_lock = locks.new_lock()
# the programs whose images and globals each Device (of whichever runtime) has loaded
_ready: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()
OFFLOAD_SUCCESS, OFFLOAD_FAIL = 0, -1
_disabled = False                              # OMP_TARGET_OFFLOAD=disabled (C programs)
_mandatory = False                             # OMP_TARGET_OFFLOAD=mandatory (C programs)

try:
    #: libomp's functions, when it is loaded in this process (else None)
    libomp: Any = ffi.dlopen(None)
    libomp.omp_get_default_device     # noqa: B018 - present when libomp is loaded
except (AttributeError, OSError, ffi.error):   # (a missing symbol: ffi.error, or AttributeError)
    libomp = None


def _after_fork_in_child() -> None:
    """A forked child (the library's pthread_atfork, or os.fork): the locks another thread
    may have held at the fork are made anew, and no device of the child's new runtime has
    loaded the programs' images yet; the programs stay registered."""
    global _init_lock
    from . import maps
    _init_lock = locks.new_lock()
    maps._mapper_lock = locks.new_lock()
    registry.lock = locks.RLock()
    _loaded.clear()
    _found.clear()
    _ready.clear()


runtime.at_fork_in_child(_after_fork_in_child)


def forget_program(prog: Program) -> None:
    """An unregistered program: no device counts it as loaded any more."""
    with _init_lock:
        for done in _ready.values():
            done.discard(prog.desc)


def ensure_runtime() -> Any:
    """The runtime. In a C program the library starts it at first use, after the
    program's images were registered: LLVM 19's plugins for the images it carries (host
    devices, four of them as LLVM's x86_64 plugin, for x86_64 images; CUDA devices for
    nvptx ones), and OMP_TARGET_OFFLOAD applied by the constructs, as LLVM 19 does (it
    keeps its devices when offloading is disabled: the device API still works on them).
    A Python program that loaded C code keeps its own runtime and settings."""
    global _disabled, _mandatory
    rt = runtime._process.live
    if rt is not None and not rt.closing:
        return rt
    if getattr(sys, "_offload_capi_owns_python", False) and rt is None:
        with _init_lock:
            if runtime._process.live is None:
                kinds = registry.kinds()
                plugins = [p for p, k in (("cuda", "nvptx"), ("host", "x86_64")) if k in kinds]
                os.environ.setdefault("OFFLOAD_PLUGINS", ",".join(plugins) or "host")
                os.environ.setdefault("OFFLOAD_HOST_NUM_DEVICES", "4")
                cfg = config.read()
                _disabled = cfg.target_offload is config.TargetOffload.DISABLED
                _mandatory = cfg.target_offload is config.TargetOffload.MANDATORY
                rt = runtime.start(dataclasses.replace(
                    cfg, target_offload=config.TargetOffload.DEFAULT))
                _record_from_environment(rt)
    return current()


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "on", "yes")


def _record_from_environment(rt: Any) -> None:
    """LIBOMPTARGET_RECORD=1: record every kernel launch on every device, as LLVM 19 (its
    memory LIBOMPTARGET_RR_DEVMEM_SIZE GiB, default 64, reserved without backing;
    LIBOMPTARGET_RR_SAVE_OUTPUT=1 also writes the memory after each kernel)."""
    if not _on("LIBOMPTARGET_RECORD"):
        return
    raw = os.environ.get("LIBOMPTARGET_RR_DEVMEM_SIZE", "").strip()
    size = (int(raw) if raw.isdigit() else 64) << 30      # LLVM ignores a bad value
    for n in range(rt.num_devices()):
        rt.manager.get_device(n).generic.start_record_replay(
            size, 0, True, _on("LIBOMPTARGET_RR_SAVE_OUTPUT"))


def fatal(msg: str, code: int = 1) -> None:
    """LLVM's FATAL_MESSAGE: `omptarget fatal error CODE: msg`, then abort."""
    sys.stderr.write(f"omptarget fatal error {code}: {msg}\n")
    sys.stderr.flush()
    os.abort()


_ADDRESS = re.compile(r"0x([0-9a-f]+)")


def describe(exc: BaseException) -> str:
    if isinstance(exc, OffloadError):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def report(exc: BaseException) -> None:
    """A failure as LLVM 19 prints it: LLVM's own lines where the error carries them
    (`omptarget message:` each, addresses 16 digits wide as LLVM's DPxMOD, then
    `omptarget error:` each), else one `omptarget error:` line."""
    messages = getattr(exc, "llvm_messages", ())
    if not messages:
        sys.stderr.write(f"omptarget error: {describe(exc)}\n")
        return
    for m in messages:
        wide = _ADDRESS.sub(lambda x: f"0x{int(x.group(1), 16):016x}", m)
        sys.stderr.write(f"omptarget message: {wide}\n")
    for line in getattr(exc, "llvm_errors", ()):
        sys.stderr.write(f"omptarget error: {line}\n")


def construct_failed(loc: Any, exc: BaseException | None = None, target: bool = False) -> None:
    """A construct that failed, as LLVM 19's handleTargetOutcome ends it: the failure
    (for a target region's map clause also LLVM's two lines after it), where to read
    more, the source location (or that there is none), then the fatal error."""
    if exc is not None:
        report(exc)
        errors: tuple[str, ...] = getattr(exc, "llvm_errors", ())
        if target and errors:
            sys.stderr.write("omptarget error: Call to targetDataBegin failed, abort target.\n"
                             "omptarget error: Failed to process data before launching the "
                             "kernel.\n")
    sys.stderr.write("omptarget error: Consult https://openmp.llvm.org/design/Runtimes.html "
                     "for debugging options.\n")
    where = location(loc)
    if where == "unknown:0:0":
        sys.stderr.write("omptarget error: Source location information not present. Compile "
                         "with -g or -gline-tables-only.\n")
    else:
        sys.stderr.write(f"{where}: ")
    fatal("failure of target construct while offloading is mandatory")


def device_number(dev: int) -> int:
    if dev == -1:
        return libomp.omp_get_default_device() if libomp is not None else \
            ensure_runtime().default_device
    return dev


def device(dev: int, construct: bool = True) -> Any:
    """The Device for an LLVM device number, its images loaded; None for the initial
    device (and, for constructs, every device when offloading is disabled)."""
    rt = runtime._process.live
    n = dev if dev >= 0 or rt is None else device_number(dev)   # the default device: now
    hit = _found.get(n)
    if hit is not None and hit[0] is rt and hit[1] == registry.version and not rt.closing:
        return hit[2]
    if rt is None or rt.closing:
        rt = ensure_runtime()
        n = dev if dev >= 0 else device_number(dev)
    if construct and _mandatory and rt._count == 0:
        # LLVM 19's checkDeviceAndCtors: no device while offloading is mandatory
        raise OffloadError(ErrorCode.INVALID_DEVICE, "No images found compatible with the "
                           "installed hardware. (OMP_TARGET_OFFLOAD=mandatory, and no "
                           "plugin found a device: offload-info says why)")
    if n >= rt._count or n < 0 or (construct and _disabled):
        if n == rt._count or n == omp.omp_initial_device or (construct and _disabled):
            return None
        if construct:                          # LLVM 19's checkDeviceAndCtors
            fatal(f"Device number '{n}' out of range, only {rt._count} devices available", n)
        return rt.device(n)                    # raises: not a device number
    d = rt.manager.devices_made.get(n) or rt.manager.get_device(n)
    seen = _loaded.get(id(d))
    if seen is None or seen[1] != registry.version:
        _load_images(d)
    if not _disabled:
        _found[n] = (rt, _loaded[id(d)][1], d)
    return d


#: device number -> (runtime, registry version, Device): what `device` found, while that
#: runtime lives and no program (un)registers (LLVM's device number of a construct; the
#: default device's, -1, as what it names at the call)
_found: dict[int, tuple[Any, int, Any]] = {}


# id(Device) -> (the Device, the registry version its images and globals are loaded for)
_loaded: dict[int, tuple[Any, int]] = {}


def _load_images(d: Any) -> None:
    """Each registered program's image for `d`'s plugin loaded on device `d`, its globals
    mapped for good (LLVM maps declare target variables, `link` reference pointers
    included, at load); the programs' `requires` flags checked first."""
    g = d.generic
    g.omp_requires(registry.requires)
    kind = d.plugin.omp_image_kind
    with _init_lock:
        version = registry.version
        done = _ready.setdefault(d, set())
        for prog in list(registry.programs.values()):
            if prog.desc in done:
                continue
            image = prog.images.get(kind) if kind else None
            if image is not None:
                program = g.omp_load(image, tuple(
                    (e.addr, e.name) for e in prog.entries if e.flags & ENTRY_INDIRECT))
                for e in prog.entries:
                    if e.size > 0 and (e.flags == 0 or is_link(e)):
                        where = g.omp_global(program, e.name)
                        if where is not None:
                            d.table.associate(e.addr, where, e.size, e.name)
            done.add(prog.desc)
        _loaded[id(d)] = (d, version)


def num_devices() -> int:
    return ensure_runtime().num_devices()

def load_device(dev: int) -> int:
    """An LLVM device number as offload's, the device's images loaded."""
    n = device_number(dev)
    if 0 <= n < num_devices():
        device(n, construct=False)
    return n
