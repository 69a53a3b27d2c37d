"""The Python bodies of offload's libomptarget.so.19.1 exports (see abi.py): a thin edge
that decodes LLVM 19's C structures and calls the runtime the Python API uses (the same
PluginManager, mapping tables and pins), so C and Python in one process share it.

Device numbers follow LLVM: -1 is libomp's default device, the initial device is
omp_get_num_devices(); a construct on the initial device runs the host fallback (kernels
return non-zero) or does nothing (data constructs). A construct that fails aborts the
process after LLVM's message, as LLVM does once offloading is mandatory."""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import config, omp, omp_async, runtime
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..plugins import _cuda_openmp
from ..runtime import current, operation
from . import maps
from .abi import ENTRY_INDIRECT
from .images import Program, Registry, _cast, addr, ffi, is_link

_registry = Registry()
_init_lock = threading.Lock()
# the programs whose images and globals each Device (of whichever runtime) has loaded
_ready: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()
_live_libs = 0
_OFFLOAD_SUCCESS, _OFFLOAD_FAIL = 0, -1
_disabled = False                              # OMP_TARGET_OFFLOAD=disabled (C programs)

ffi.cdef("int omp_get_default_device(void);")
try:
    _libomp: Any = ffi.dlopen(None)
    _libomp.omp_get_default_device     # noqa: B018 - present when libomp is loaded
except (AttributeError, OSError):
    _libomp = None


def _defaults() -> None:
    """Called at the library's first use."""


def _rt() -> Any:
    """The runtime. In a C program the library starts it at first use, after the
    program's images were registered: LLVM 19's plugins for the images it carries (host
    devices, four of them as LLVM's x86_64 plugin, for x86_64 images; CUDA devices for
    nvptx ones), and OMP_TARGET_OFFLOAD applied by the constructs, as LLVM 19 does (it
    keeps its devices when offloading is disabled: the device API still works on them).
    A Python program that loaded C code keeps its own runtime and settings."""
    global _disabled
    rt = runtime._process.live
    if rt is not None and not rt.closing:
        return rt
    if getattr(sys, "_offload_capi_owns_python", False) and rt is None:
        with _init_lock:
            if runtime._process.live is None:
                kinds = _registry.kinds()
                plugins = [p for p, k in (("cuda", "nvptx"), ("host", "x86_64")) if k in kinds]
                os.environ.setdefault("OFFLOAD_PLUGINS", ",".join(plugins) or "host")
                os.environ.setdefault("OFFLOAD_HOST_NUM_DEVICES", "4")
                cfg = config.read()
                _disabled = cfg.target_offload is config.TargetOffload.DISABLED
                runtime.start(dataclasses.replace(cfg,
                                                  target_offload=config.TargetOffload.DEFAULT))
    return current()


def _fatal(msg: str) -> None:
    sys.stderr.write(f"omptarget fatal error 1: {msg}\n")
    sys.stderr.flush()
    os.abort()


def _device_number(dev: int) -> int:
    if dev == -1:
        return _libomp.omp_get_default_device() if _libomp is not None else \
            _rt().default_device
    return dev


def _device(dev: int, construct: bool = True) -> Any:
    """The Device for an LLVM device number, its images loaded; None for the initial
    device (and, for constructs, every device when offloading is disabled)."""
    rt = runtime._process.live
    if rt is None or rt.closing:
        rt = _rt()
    n = dev if dev >= 0 else _device_number(dev)
    if n >= rt._count or n < 0 or (construct and _disabled):
        if n == rt._count or n == omp.omp_initial_device or (construct and _disabled):
            return None
        return rt.device(n)                    # raises: not a device number
    d = rt.manager.get_device(n)
    seen = _loaded.get(id(d))
    if seen is None or seen[1] != _registry.version:
        _load_images(d)
    return d


# id(Device) -> (the Device, the registry version its images and globals are loaded for)
_loaded: dict[int, tuple[Any, int]] = {}


def _load_images(d: Any) -> None:
    """Each registered program's image on device `d`, its globals mapped for good (LLVM
    maps declare target variables, `link` reference pointers included, at load)."""
    with _init_lock:
        version = _registry.version
        done = _ready.setdefault(d, set())
        for prog in list(_registry.programs.values()):
            if prog.desc in done:
                continue
            if d.plugin.name == "cuda" and "nvptx" in prog.images:
                binary, program = _cuda_image(d, prog)
                for e in prog.entries:
                    if e.size > 0 and (e.flags == 0 or is_link(e)):
                        g = _cuda_openmp.global_address(d.generic, program, e.name)
                        if g is not None:
                            d.table.associate(e.addr, g[0], e.size)
            else:
                handle = _registry.load(prog, d.number)
                if handle is not None:
                    for e in prog.entries:
                        if e.size > 0 and (e.flags == 0 or is_link(e)):
                            d.table.associate(e.addr, _registry.symbol(handle, e.name),
                                              e.size)
            done.add(prog.desc)
        _loaded[id(d)] = (d, version)


def _cuda_image(d: Any, prog: Program) -> tuple[Any, Any]:
    """The program's nvptx image loaded on CUDA device `d` (environment written once)."""
    binary = prog.loaded.get(("nvptx", d.number))
    if binary is None:
        binary = Binary.from_bytes(prog.images["nvptx"], None)
        prog.loaded[("nvptx", d.number)] = binary
    fresh = binary.digest not in d.generic._loaded
    program = d.generic.load(binary)
    if fresh:
        _cuda_openmp.prepare(d.generic, program, tuple(
            (e.addr, e.name) for e in prog.entries if e.flags & ENTRY_INDIRECT))
    return binary, program


def _guard(default: Any, fn: Callable[..., Any], runtime_op: bool = True
           ) -> Callable[..., Any]:
    """Run an export's body as an offload operation (`runtime_op`; else, for
    registration, without starting the runtime); an error becomes LLVM's message and
    the failure value."""
    if not runtime_op:
        def plain(*args: Any) -> Any:
            try:
                return fn(*args)
            except OffloadError as exc:
                sys.stderr.write(f"omptarget error: {exc.message}\n")
                return default
        return plain
    op = operation(fn)

    def call(*args: Any) -> Any:
        try:
            if runtime._process.live is None:
                _rt()                          # started as the C program needs it
            return op(*args)
        except OffloadError as exc:
            sys.stderr.write(f"omptarget error: {exc.message}\n")
            return default
    call.__name__ = fn.__name__
    return call


def _p(x: Any) -> int:
    return addr(x) if x is not None else 0


# ---- registration ------------------------------------------------------------------------
def register_lib(desc: Any) -> None:
    global _live_libs
    _defaults()
    _registry.register(addr(desc))
    _live_libs += 1


def unregister_lib(desc: Any) -> None:
    global _live_libs
    prog = _registry.unregister(addr(desc))
    if prog is None:
        return
    _live_libs -= 1
    _KERNELS.clear()
    if _live_libs == 0:
        _stop_profile()
    with _init_lock:
        for done in _ready.values():
            done.discard(prog.desc)


# ---- kernels --------------------------------------------------------------------------------
_FN_TYPES: dict[int, Any] = {}
_CALLABLE: dict[tuple[int, int], Any] = {}     # (address, arguments) -> cffi function
_KERNELS: dict[tuple[int, int], tuple[int, str]] = {}   # (region id, device) -> (fn, name)
_T_KARGS = ffi.typeof("KernelArgsTy *")
_NO_DYN = 2**64 - 1                            # dyn_ptr = ~0, as LLVM's host plugin


def _call_kernel(fn: int, args: list[int]) -> None:
    """kernel(~0, args...): every argument pointer-sized (LLVM's host plugin); the GIL is
    released while it runs."""
    n = len(args)
    f = _CALLABLE.get((fn, n))
    if f is None:
        t = _FN_TYPES.get(n)
        if t is None:
            t = _FN_TYPES[n] = ffi.typeof(f"void (*)({', '.join(['uintptr_t'] * (n + 1))})")
        f = _CALLABLE[(fn, n)] = ffi.cast(t, fn)
    f(_NO_DYN, *args)


def _kernel(dev: Any, host_ptr: int) -> tuple[Any, str]:
    """(address, or nvptx Binary on a CUDA device; name) of the kernel of region
    `host_ptr` in `dev`'s copy of its image."""
    key = (host_ptr, dev.number)
    hit = _KERNELS.get(key)
    if hit is None:
        prog, entry = _registry.kernel(host_ptr)
        if dev.plugin.name == "cuda" and "nvptx" in prog.images:
            hit = _KERNELS[key] = (_cuda_image(dev, prog)[0], entry.name)
            return hit
        handle = _registry.load(prog, dev.number)
        if handle is None:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"kernel '{entry.name}' has no image for device {dev.number} "
                               f"({dev.plugin.name})")
        hit = _KERNELS[key] = (_registry.symbol(handle, entry.name), entry.name)
    return hit


def _run_kernel(dev: Any, fn: Any, name: str, kargs: list[int], teams: int, threads: int,
                tripcount: int) -> None:
    """Run the kernel: a host function called in place, or an nvptx kernel launched with
    LLVM 19's geometry and its launch environment as argument 0."""
    if isinstance(fn, int):
        _call_kernel(fn, kargs)
        return
    g = dev.generic
    program = g.load(fn)
    functions = _cuda_openmp.indirect_functions(g, program)
    if functions:
        # clang 19 emits no lookup at indirect call sites (later clang calls
        # __llvm_omp_indirect_call_lookup there): a host function pointer passed by value
        # arrives as the device function, or calling it would fault (as under LLVM 19)
        kargs = [functions.get(a, a) for a in kargs]
    env = _cuda_openmp.kernel_environment(g, program, name)
    blocks, block = _cuda_openmp.geometry(g, env, teams, threads, tripcount,
                                          g.kernel(fn, name).handle[1])
    launch_env, allocs = _cuda_openmp.launch_environment(g, env, blocks)
    try:
        if dev.table.info & 0x10:
            sys.stderr.write(f"omptarget device {dev.number} info: Launching kernel {name} "
                             f"with {blocks} blocks and {block} threads\n")
        dev.plugin.launch_kernel(dev.local_id, fn, name, [launch_env, *kargs], blocks, block)
        _cuda_openmp.flush_printf(g, fn)
    finally:
        for p in allocs:
            g.free(p)


def _launch(dev: Any, host_ptr: int, decoded: tuple[list[maps.Arg], list[maps.Arg]],
            bases: Any, teams: int = -1, threads: int = -1, tripcount: int = 0) -> int:
    args, given = decoded
    fn, name = _kernel(dev, host_ptr)
    if not args:                                 # nothing mapped, nothing passed
        _run_kernel(dev, fn, name, [], teams, threads, tripcount)
        return _OFFLOAD_SUCCESS
    maps.begin(dev, args, bases)
    try:
        kargs, private = maps.kernel_args(dev, given)
        try:
            if dev.table.info & 0x10 and isinstance(fn, int):
                sys.stderr.write(f"omptarget device {dev.number} info: Launching kernel "
                                 f"{name} with {len(kargs)} argument(s)\n")
            _run_kernel(dev, fn, name, kargs, teams, threads, tripcount)
        finally:
            for p in private:
                dev.free(p)
    except BaseException:
        dev.table.target_data_end([a.item() for a in args if maps._mapped(a)],
                                  copy_back=False)
        raise
    maps.end(dev, args)
    return _OFFLOAD_SUCCESS


_EMPTY: tuple[list[maps.Arg], list[maps.Arg]] = ([], [])


def target_kernel(loc: Any, dev: int, num_teams: int, thread_limit: int, host_ptr: Any,
                  kargs: Any) -> int:
    d = _device(dev)
    if d is None:
        return _OFFLOAD_FAIL                   # the host fallback runs the region
    k = _cast(_T_KARGS, kargs)
    n = k.NumArgs
    args = maps.decode(n, k.ArgBasePtrs, k.ArgPtrs, k.ArgSizes, k.ArgTypes, k.ArgNames,
                       k.ArgMappers) if n else _EMPTY
    try:
        return _launch(d, addr(host_ptr), args, k.ArgBasePtrs, num_teams, thread_limit,
                       int(k.Tripcount))
    except OffloadError as exc:
        sys.stderr.write(f"omptarget error: {exc.message}\n")
        _fatal("failure of target construct while offloading is mandatory")
        return _OFFLOAD_FAIL


def _legacy_target(dev: int, host_ptr: Any, n: int, bases: Any, begins: Any, sizes: Any,
                   types: Any, names: Any = None, mappers: Any = None) -> int:
    d = _device(dev)
    if d is None:
        return _OFFLOAD_FAIL
    args = maps.decode(n, bases, begins, sizes, types, names, mappers)
    try:
        return _launch(d, addr(host_ptr), args, bases)
    except OffloadError as exc:
        sys.stderr.write(f"omptarget error: {exc.message}\n")
        _fatal("failure of target construct while offloading is mandatory")
        return _OFFLOAD_FAIL


# ---- data -------------------------------------------------------------------------------------
def _data(kind: str, dev: int, n: int, bases: Any, begins: Any, sizes: Any, types: Any,
          names: Any = None, mappers: Any = None) -> None:
    d = _device(dev)
    if d is None:
        return
    args, _ = maps.decode(n, bases, begins, sizes, types, names, mappers)
    try:
        if kind == "begin":
            maps.begin(d, args, bases)
        elif kind == "end":
            maps.end(d, args)
        else:
            maps.update(d, args)
    except OffloadError as exc:
        sys.stderr.write(f"omptarget error: {exc.message}\n")
        _fatal("failure of target construct while offloading is mandatory")
    d.table.dump_if_asked()


# ---- the OpenMP device API, through offload.omp with pointers as ints ----------------------
def _ptr(v: int) -> Any:
    return ffi.cast("void *", v)


def _num_devices() -> int:
    return _rt().num_devices()


_profile: Any = None


def _start_profile() -> None:
    """OFFLOAD_CAPI_PROFILE=path: profile the exports (cProfile) of a C program; the
    statistics are written when its last library unregisters (at its exit)."""
    global _profile
    if os.environ.get("OFFLOAD_CAPI_PROFILE"):
        import cProfile
        _profile = cProfile.Profile()
        _profile.enable()


def _stop_profile() -> None:
    if _profile is not None:
        _profile.disable()
        _profile.dump_stats(os.environ["OFFLOAD_CAPI_PROFILE"])


def bind(lib_ffi: Any) -> None:
    """Install every export's body (cffi's def_extern) on the library's ffi."""
    _defaults()
    _start_profile()

    def ext(name: str, default: Any = None, runtime_op: bool = True
            ) -> Callable[[Callable[..., Any]], None]:
        def put(fn: Callable[..., Any]) -> None:
            lib_ffi.def_extern(name=f"_offload_{name}")(_guard(default, fn, runtime_op))
        return put

    def data(kind: str, legacy: bool) -> Callable[..., None]:
        if legacy:
            return lambda dev, n, bases, begins, sizes, types, *deps: _data(
                kind, dev, n, bases, begins, sizes, types)
        return lambda loc, dev, n, bases, begins, sizes, types, names, mappers, *deps: _data(
            kind, dev, n, bases, begins, sizes, types, names, mappers)

    for kind in ("begin", "end", "update"):
        base = f"__tgt_target_data_{kind}"
        ext(base)(data(kind, True))
        ext(f"{base}_nowait")(data(kind, True))
        ext(f"{base}_mapper")(data(kind, False))
        ext(f"{base}_nowait_mapper")(data(kind, False))

    ext("__tgt_register_lib", runtime_op=False)(register_lib)
    ext("__tgt_unregister_lib", runtime_op=False)(unregister_lib)
    ext("__tgt_register_requires", runtime_op=False)(lambda flags: None)   # via the entries
    ext("__tgt_init_all_rtls")(lambda: [_device(i) for i in range(_num_devices())] and None)
    ext("__tgt_rtl_init")(lambda: None)
    ext("__tgt_rtl_deinit")(lambda: None)

    ext("__tgt_target_kernel", _OFFLOAD_FAIL)(target_kernel)
    ext("__tgt_target_kernel_nowait", _OFFLOAD_FAIL)(
        lambda loc, dev, nt, tl, hp, ka, *deps: target_kernel(loc, dev, nt, tl, hp, ka))
    ext("__tgt_target", _OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t: _legacy_target(dev, hp, n, b, a, s, t))
    ext("__tgt_target_nowait", _OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t, *deps: _legacy_target(dev, hp, n, b, a, s, t))
    ext("__tgt_target_mapper", _OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m: _legacy_target(dev, hp, n, b, a, s, t, nm, m))
    ext("__tgt_target_nowait_mapper", _OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m, *deps:
        _legacy_target(dev, hp, n, b, a, s, t, nm, m))
    ext("__tgt_target_teams", _OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t, nt, tl: _legacy_target(dev, hp, n, b, a, s, t))
    ext("__tgt_target_teams_nowait", _OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t, nt, tl, *deps: _legacy_target(dev, hp, n, b, a, s, t))
    ext("__tgt_target_teams_mapper", _OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m, nt, tl:
        _legacy_target(dev, hp, n, b, a, s, t, nm, m))
    ext("__tgt_target_teams_nowait_mapper", _OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m, nt, tl, *deps:
        _legacy_target(dev, hp, n, b, a, s, t, nm, m))
    ext("__tgt_target_kernel_replay", _OFFLOAD_FAIL)(_replay)
    ext("__kmpc_push_target_tripcount")(lambda dev, trip: None)    # the host ignores it
    ext("__kmpc_push_target_tripcount_mapper")(lambda loc, dev, trip: None)

    ext("__tgt_mapper_num_components", 0)(lambda h: maps.num_components(_p(h)))
    ext("__tgt_push_mapper_component")(
        lambda h, b, a, s, t, nm: maps.push_component(_p(h), _p(b), _p(a), s, t, nm))
    ext("__tgt_target_nowait_query")(_nowait_query)

    # the OpenMP device API
    ext("omp_get_num_devices", 0)(_num_devices)
    ext("__tgt_get_num_devices", 0)(_num_devices)
    ext("omp_get_initial_device", 0)(_num_devices)
    ext("omp_get_device_num", 0)(_num_devices)        # called on the host: the initial one
    ext("tgt_pause_resource", 0)(lambda kind, dev: 0)
    ext("omp_get_mapped_ptr", ffi.NULL)(
        lambda p, dev: _ptr(omp.omp_get_mapped_ptr(_p(p), _device_number(dev)) or 0))
    ext("omp_target_alloc", ffi.NULL)(
        lambda size, dev: _ptr(_alloc(omp.omp_target_alloc, size, dev)))
    ext("omp_target_free")(lambda p, dev: _free(omp.omp_target_free, p, dev))
    for kind in ("device", "host", "shared"):
        ext(f"llvm_omp_target_alloc_{kind}", ffi.NULL)(
            _bind_alloc(getattr(omp, f"llvm_omp_target_alloc_{kind}")))
        ext(f"llvm_omp_target_free_{kind}")(
            _bind_free(getattr(omp, f"llvm_omp_target_free_{kind}")))
    ext("omp_target_is_present", 0)(
        lambda p, dev: omp.omp_target_is_present(_p(p), _device_number(dev)))
    ext("omp_target_memcpy", _OFFLOAD_FAIL)(_memcpy)
    ext("omp_target_memcpy_async", _OFFLOAD_FAIL)(
        lambda d, s, n, do, so, dd, sd, cnt, lst: _memcpy(d, s, n, do, so, dd, sd))
    ext("omp_target_memcpy_rect", _OFFLOAD_FAIL)(_memcpy_rect)
    ext("omp_target_memcpy_rect_async", _OFFLOAD_FAIL)(
        lambda d, s, es, nd, v, do, so, dd, sdim, ddev, sdev, cnt, lst:
        _memcpy_rect(d, s, es, nd, v, do, so, dd, sdim, ddev, sdev))
    ext("omp_target_memset", ffi.NULL)(_memset)
    ext("omp_target_memset_async", ffi.NULL)(
        lambda p, v, n, dev, cnt, lst: _memset(p, v, n, dev))
    ext("omp_target_associate_ptr", _OFFLOAD_FAIL)(
        lambda h, d, size, off, dev: omp.omp_target_associate_ptr(
            _p(h), _p(d), size, off, _load_dev(dev)))
    ext("omp_target_disassociate_ptr", _OFFLOAD_FAIL)(
        lambda h, dev: omp.omp_target_disassociate_ptr(_p(h), _load_dev(dev)))
    ext("llvm_omp_target_lock_mem", ffi.NULL)(
        lambda p, size, dev: _ptr(omp.llvm_omp_target_lock_mem(_p(p), size, _load_dev(dev))))
    ext("llvm_omp_target_unlock_mem")(
        lambda p, dev: omp.llvm_omp_target_unlock_mem(_p(p), _load_dev(dev)))
    ext("llvm_omp_target_dynamic_shared_alloc", ffi.NULL)(lambda: ffi.NULL)
    ext("ompx_dump_mapping_tables")(omp_async.ompx_dump_mapping_tables)

    # interop objects: none of offload's host devices has a foreign runtime to hand out
    ext("__tgt_interop_init")(_interop_init)
    ext("__tgt_interop_use")(lambda loc, gtid, ip, dev, nd, dl, nw: None)
    ext("__tgt_interop_destroy")(_interop_destroy)
    ext("omp_get_interop_int", 0)(_interop_int)
    ext("omp_get_interop_ptr", ffi.NULL)(_interop_ptr)
    ext("omp_get_interop_str", ffi.NULL)(_interop_str)
    ext("omp_get_interop_name", ffi.NULL)(_interop_name)
    ext("omp_get_interop_type_desc", ffi.NULL)(_interop_type_desc)

    ext("__tgt_set_info_flag")(_set_info)
    ext("__tgt_print_device_info", 0)(_print_device_info)
    ext("__tgt_activate_record_replay", _OFFLOAD_FAIL)(_record_replay)
    ext("ompt_libomptarget_connect")(lambda result: None)   # no OMPT tool support


def _load_dev(dev: int) -> int:
    """An LLVM device number as offload's, the device's images loaded."""
    n = _device_number(dev)
    if 0 <= n < _num_devices():
        _device(n, construct=False)
    return n


def _alloc(fn: Callable[[int, int], int], size: int, dev: int) -> int:
    return fn(size, _load_dev(dev)) or 0


def _free(fn: Callable[[Any, int], None], p: Any, dev: int) -> None:
    fn(_p(p), _load_dev(dev))


def _bind_alloc(fn: Callable[[int, int], int]) -> Callable[[int, int], Any]:
    return lambda size, dev: _ptr(_alloc(fn, size, dev))


def _bind_free(fn: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    return lambda p, dev: _free(fn, p, dev)


def _memcpy(d: Any, s: Any, n: int, do: int, so: int, dd: int, sd: int) -> int:
    return omp.omp_target_memcpy(_p(d), _p(s), n, do, so, _load_dev(dd), _load_dev(sd))


def _memcpy_rect(d: Any, s: Any, es: int, nd: int, vol: Any, doff: Any, soff: Any,
                 ddim: Any, sdim: Any, ddev: int, sdev: int) -> int:
    if d == ffi.NULL and s == ffi.NULL:        # the query form: the largest rank
        return omp.INT_MAX

    def ints(p: Any) -> list[int]:
        return [int(p[i]) for i in range(nd)] if p != ffi.NULL else []
    return omp.omp_target_memcpy_rect(_p(d), _p(s), es, nd, ints(vol), ints(doff), ints(soff),
                                      ints(ddim), ints(sdim), _load_dev(ddev), _load_dev(sdev))


def _memset(p: Any, v: int, n: int, dev: int) -> Any:
    return _ptr(omp_async.omp_target_memset(_p(p), v, n, _load_dev(dev)) or 0)


def _nowait_query(handle: Any) -> None:
    """offload completes target tasks before their entry points return: nothing pends."""
    if handle != ffi.NULL:
        ffi.cast("void **", handle)[0] = ffi.NULL


def _replay(*args: Any) -> int:
    sys.stderr.write("omptarget error: kernel record and replay is not supported by "
                     "offload\n")
    return _OFFLOAD_FAIL


def _record_replay(*args: Any) -> int:
    sys.stderr.write("omptarget error: kernel record and replay is not supported by "
                     "offload\n")
    return _OFFLOAD_FAIL


def _set_info(flags: int) -> None:
    for d in _rt().manager.initialized():
        d.table.info = int(flags)


def _print_device_info(dev: int) -> int:
    d = _device(dev)
    if d is None:
        return 0
    sys.stderr.write(f"Device {d.number} ({d.plugin.name}):\n")
    for k, v in d.info().items():
        sys.stderr.write(f"    {k}: {v}\n")
    return 1


# ---- interop: OpenMP's omp_interop_t for devices with no foreign runtime ----------------------
_interops: dict[int, tuple[Any, int]] = {}
_OMP_IPR_FR_ID, _OMP_IPR_DEVICE_NUM = -1, -5
_IRC_SUCCESS, _IRC_NO_VALUE, _IRC_OUT_OF_RANGE, _IRC_TYPE_INT = 0, 1, -5, -2
_PROPS = {-1: b"fr_id", -2: b"fr_name", -3: b"vendor", -4: b"vendor_name", -5: b"device_num",
          -6: b"platform", -7: b"device", -8: b"device_context", -9: b"targetsync"}


def _interop_init(loc: Any, gtid: int, interop: Any, kind: int, dev: int, *rest: Any) -> None:
    """An interop object naming the device (no foreign runtime: properties beyond the
    device number report no value)."""
    n = _device_number(dev)
    obj = ffi.new("int64_t[2]", [n, kind])
    _interops[addr(obj)] = (obj, n)
    ffi.cast("void **", interop)[0] = obj


def _interop_destroy(loc: Any, gtid: int, interop: Any, *rest: Any) -> None:
    p = ffi.cast("void **", interop)
    _interops.pop(addr(p[0]), None)
    p[0] = ffi.NULL


def _ret(code: Any, v: int) -> None:
    if code != ffi.NULL:
        code[0] = v


def _interop_int(interop: Any, prop: int, code: Any) -> int:
    found = _interops.get(addr(interop))
    if found is None:
        _ret(code, _IRC_OUT_OF_RANGE if interop == ffi.NULL else _IRC_NO_VALUE)
        return 0
    if prop == _OMP_IPR_DEVICE_NUM:
        _ret(code, _IRC_SUCCESS)
        return found[1]
    _ret(code, _IRC_NO_VALUE)
    return 0


def _interop_ptr(interop: Any, prop: int, code: Any) -> Any:
    _ret(code, _IRC_NO_VALUE if addr(interop) in _interops else _IRC_OUT_OF_RANGE)
    return ffi.NULL


def _interop_str(interop: Any, prop: int, code: Any) -> Any:
    _ret(code, _IRC_NO_VALUE if addr(interop) in _interops else _IRC_OUT_OF_RANGE)
    return ffi.NULL


_NAMES = {k: ffi.new("char[]", v) for k, v in _PROPS.items()}


def _interop_name(interop: Any, prop: int) -> Any:
    return _NAMES.get(prop, ffi.NULL)


_TYPE_DESC = ffi.new("char[]", b"int")


def _interop_type_desc(interop: Any, prop: int) -> Any:
    return _TYPE_DESC if prop in _PROPS else ffi.NULL


__all__ = ["Program", "bind"]
