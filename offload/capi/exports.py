"""The Python bodies of offload's libomptarget.so.19.1 exports (see abi.py): a thin edge
that decodes LLVM 19's C structures and calls the runtime the Python API uses (the same
PluginManager, mapping tables and pins), so C and Python in one process share it.

Device numbers follow LLVM: -1 is libomp's default device, the initial device is
omp_get_num_devices(); a construct on the initial device runs the host fallback (kernels
return non-zero) or does nothing (data constructs). A construct that fails aborts the
process after LLVM's message, as LLVM does once offloading is mandatory."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from .. import omp, omp_async, profile, runtime
from ..diagnostics import say
from ..errors import ErrorCode, OffloadError
from ..mapping import TRACED
from ..runtime import operation
from ..statistics import write_stats
from . import maps, ompt
from .abi import EXPORTS
from .devices import (
    OFFLOAD_FAIL,
    OFFLOAD_SUCCESS,
    construct_failed,
    describe,
    device,
    device_number,
    ensure_runtime,
    fatal,
    forget_program,
    libomp,
    load_device,
    num_devices,
    registry,
    report,
)
from .images import addr, ffi
from .interop_objects import (
    interop_destroy,
    interop_init,
    interop_int,
    interop_name,
    interop_ptr,
    interop_str,
    interop_type_desc,
    interop_use,
)
from .kernels import (
    construct_device,
    dump_tables,
    dump_tables_at_exit,
    legacy_target,
    push_tripcount,
    target_kernel,
    target_replay,
)

_live_libs = 0                   # LLVM's runtime reference count: libraries and rtl_init
_lib: Any = None                 # the library's own C functions (OMPT)


#: exports made to fail (tests): OFFLOAD_CAPI_INJECT=name,name... or inject_failure()
_inject: set[str] = {n for n in os.environ.get("OFFLOAD_CAPI_INJECT", "").split(",") if n}
_start_failure: list[BaseException] = []      # the runtime's start-up failure, reported once


def inject_failure(*names: str) -> None:
    """Make the named exports raise on their next calls (for tests; none: stop)."""
    _inject.clear()
    _inject.update(names)


def _guard(name: str, default: Any, fn: Callable[..., Any], runtime_op: bool = True,
           construct: bool = False) -> Callable[..., Any]:
    """Run an export's body as an offload operation (`runtime_op`; else, for
    registration, without starting the runtime). Whatever it raises becomes LLVM's
    failure for it: one `omptarget error:` line, then the failure value, or for a
    construct LLVM's fatal error (a construct fails while offloading is mandatory). A
    runtime that cannot start is reported once and fails every call."""
    op = operation(fn) if runtime_op else fn
    located = EXPORTS.get(name, "").split("(", 1)[-1].startswith("void *loc")

    def call(*args: Any) -> Any:
        p = None
        try:
            if _inject and name in _inject:
                raise RuntimeError(f"failure injected into {name}")
            if runtime_op and runtime._process.live is None:
                if _start_failure:
                    raise _start_failure[0]
                try:
                    ensure_runtime()             # started as the C program needs it
                except BaseException as exc:
                    _start_failure.append(exc)
                    sys.stderr.write(f"omptarget error: the offload runtime could not "
                                     f"start: {describe(exc)}\n")
                    raise
            p = profile.active if located else None
            if p is not None:
                p.set_c_source(_psource(args[0]))
            return op(*args)
        except BaseException as exc:             # noqa: B036 - every failure is reported
            if not (_start_failure and exc is _start_failure[0]):
                report(exc)
            if construct:
                construct_failed(None)
            return default
        finally:
            if p is not None:
                p.set_c_source(None)
    call.__name__ = fn.__name__
    return call


def _psource(loc: Any) -> str | None:
    """The `psource` of a construct's ident_t (";file;function;line;column;;")."""
    if loc == ffi.NULL:
        return None
    src = ffi.cast("ident_t *", loc).psource
    return ffi.string(src).decode(errors="replace") if src != ffi.NULL else None


def _p(x: Any) -> int:
    return addr(x) if x is not None else 0


# ---- registration ------------------------------------------------------------------------
def register_lib(desc: Any) -> None:
    """LLVM 19's registration: OMPT connected first (a tool's initial device is then the
    only one there is), the program's images noted; with a tool, the runtime started and
    its devices told to it now, as LLVM initializes them here."""
    tool = ompt.connect(_lib) if _lib is not None else False
    registry.register(addr(desc))
    rtl_init(start=False)
    if tool:
        ompt.announce_devices(ensure_runtime())


def unregister_lib(desc: Any) -> None:
    prog = registry.unregister(addr(desc))
    if prog is None:
        return
    rtl_deinit()
    forget_program(prog)


def rtl_init(start: bool = True) -> None:
    """initRuntime: one more reference on the runtime (started when `start`)."""
    global _live_libs
    _live_libs += 1
    if start:
        ensure_runtime()


def rtl_deinit() -> None:
    """deinitRuntime: one reference fewer; the last one ends it as LLVM's does (tables
    dumped under LIBOMPTARGET_INFO, devices finalized for an OMPT tool)."""
    global _live_libs
    if _live_libs <= 0:
        return
    _live_libs -= 1
    if _live_libs == 0:
        dump_tables_at_exit()
        ompt.finalize_devices()
        _stop_profile()
        profile.flush()
        rt = runtime._process.live
        if rt is not None:
            write_stats(rt)


def register_requires(flags: int) -> None:
    """Removed in LLVM 19 (the flags come with each image's entries): its message."""
    sys.stderr.write("omptarget message: The void __tgt_register_requires(int64_t) function "
                     "has been removed. Old OpenMP requirements will not be handled\n")


# ---- data -------------------------------------------------------------------------------------
def _data(kind: str, dev: int, n: int, bases: Any, begins: Any, sizes: Any, types: Any,
          names: Any = None, mappers: Any = None, loc: Any = None,
          nowait: bool = False) -> None:
    d = construct_device(dev)
    if d is None:
        return
    if not ompt.listening:                       # one array section: in fewer steps
        one = maps.one_component(n, bases, begins, sizes, types, mappers)
        if one is not None and maps.plain_one(d, *one) and _plain(kind, d, one, loc):
            return
    args, given = maps.decode(n, bases, begins, sizes, types, names, mappers)
    if d.table.info & 0x1:                       # LIBOMPTARGET_INFO: KERNEL_ARGS
        for line in maps.describe(kind + "_nowait" if nowait else kind, loc, given):
            say(d.number, line)
    if ompt.listening:
        with ompt.region(_REGION_KINDS[kind], d.number):
            _apply(kind, d, args, bases, loc)
    else:
        _apply(kind, d, args, bases, loc)
    dump_tables(d, loc)


_REGION_KINDS = {"begin": ompt.ENTER_DATA, "end": ompt.EXIT_DATA, "update": ompt.UPDATE}


def _plain(kind: str, d: Any, one: tuple[int, int, int, int], loc: Any = None) -> bool:
    """Run the construct on its one plain component (maps.plain_one) in fewer steps;
    False when it is a motion both ways (the general path)."""
    _, begin, size, t = one
    t &= 0x3
    if kind == "update" and t not in (1, 2):
        return False
    try:
        if kind == "begin":
            d.table.begin_plain(begin, size, t, None)
        elif kind == "end":
            d.table.end_plain(begin, size, t, None)
        else:
            d.table.update_plain(begin, size, t)
    except OffloadError as exc:
        construct_failed(loc, exc)
    return True


def _apply(kind: str, d: Any, args: list[maps.Arg], bases: Any, loc: Any) -> None:
    one = maps.plain(d, args)
    if one is not None and _plain(kind, d, (one.base, one.begin, one.size, one.type), loc):
        return
    try:
        if kind == "begin":
            maps.begin(d, args, bases)
        elif kind == "end":
            maps.end(d, args)
        else:
            maps.update(d, args)
    except OffloadError as exc:
        construct_failed(loc, exc)


# ---- the OpenMP device API, through offload.omp with pointers as ints ----------------------
def _ptr(v: int) -> Any:
    return ffi.cast("void *", v)




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


def bind(lib_ffi: Any, lib: Any = None) -> None:
    """Install every export's body (cffi's def_extern) on the library's ffi; `lib`: its
    C functions (OMPT)."""
    global _lib
    _lib = lib
    _start_profile()

    def ext(name: str, default: Any = None, runtime_op: bool = True
            ) -> Callable[[Callable[..., Any]], None]:
        def put(fn: Callable[..., Any]) -> None:
            lib_ffi.def_extern(name=f"_offload_{name}", onerror=_escaped)(
                _guard(name, default, fn, runtime_op, name in CONSTRUCTS))
        return put

    def data(kind: str, legacy: bool, nowait: bool) -> Callable[..., None]:
        if legacy:
            return lambda dev, n, bases, begins, sizes, types, *deps: _data(
                kind, dev, n, bases, begins, sizes, types, nowait=nowait)
        return lambda loc, dev, n, bases, begins, sizes, types, names, mappers, *deps: _data(
            kind, dev, n, bases, begins, sizes, types, names, mappers, loc, nowait)

    for kind in ("begin", "end", "update"):
        base = f"__tgt_target_data_{kind}"
        ext(base)(data(kind, True, False))
        ext(f"{base}_nowait")(data(kind, True, True))
        ext(f"{base}_mapper")(data(kind, False, False))
        ext(f"{base}_nowait_mapper")(data(kind, False, True))

    ext("__tgt_register_lib", runtime_op=False)(register_lib)
    ext("__tgt_unregister_lib", runtime_op=False)(unregister_lib)
    ext("__tgt_register_requires", runtime_op=False)(register_requires)
    ext("__tgt_init_all_rtls")(lambda: [device(i) for i in range(num_devices())] and None)
    ext("__tgt_rtl_init", runtime_op=False)(rtl_init)
    ext("__tgt_rtl_deinit", runtime_op=False)(rtl_deinit)

    ext("__tgt_target_kernel", OFFLOAD_FAIL)(target_kernel)
    ext("__tgt_target_kernel_nowait", OFFLOAD_FAIL)(
        lambda loc, dev, nt, tl, hp, ka, *deps: target_kernel(loc, dev, nt, tl, hp, ka))
    ext("__tgt_target", OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t: legacy_target(dev, hp, n, b, a, s, t))
    ext("__tgt_target_nowait", OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t, *deps: legacy_target(dev, hp, n, b, a, s, t))
    ext("__tgt_target_mapper", OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m: legacy_target(dev, hp, n, b, a, s, t, nm, m))
    ext("__tgt_target_nowait_mapper", OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m, *deps:
        legacy_target(dev, hp, n, b, a, s, t, nm, m))
    ext("__tgt_target_teams", OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t, nt, tl:
        legacy_target(dev, hp, n, b, a, s, t, None, None, nt, tl))
    ext("__tgt_target_teams_nowait", OFFLOAD_FAIL)(
        lambda dev, hp, n, b, a, s, t, nt, tl, *deps:
        legacy_target(dev, hp, n, b, a, s, t, None, None, nt, tl))
    ext("__tgt_target_teams_mapper", OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m, nt, tl:
        legacy_target(dev, hp, n, b, a, s, t, nm, m, nt, tl))
    ext("__tgt_target_teams_nowait_mapper", OFFLOAD_FAIL)(
        lambda loc, dev, hp, n, b, a, s, t, nm, m, nt, tl, *deps:
        legacy_target(dev, hp, n, b, a, s, t, nm, m, nt, tl))
    ext("__tgt_target_kernel_replay", OFFLOAD_FAIL)(target_replay)
    ext("__kmpc_push_target_tripcount")(push_tripcount)
    ext("__kmpc_push_target_tripcount_mapper")(lambda loc, dev, trip: push_tripcount(dev, trip))

    ext("__tgt_mapper_num_components", 0)(lambda h: maps.num_components(_p(h)))
    ext("__tgt_push_mapper_component")(
        lambda h, b, a, s, t, nm: maps.push_component(_p(h), _p(b), _p(a), s, t, nm))
    ext("__tgt_target_nowait_query")(_nowait_query)

    # the OpenMP device API
    ext("omp_get_num_devices", 0, runtime_op=False)(_devices_so_far)
    ext("__tgt_get_num_devices", 0, runtime_op=False)(_devices_so_far)
    ext("omp_get_initial_device", 0, runtime_op=False)(_devices_so_far)
    ext("omp_get_device_num", 0)(num_devices)        # called on the host: the initial one
    ext("tgt_pause_resource", 0)(lambda kind, dev: 0)
    ext("omp_get_mapped_ptr", ffi.NULL)(
        lambda p, dev: _ptr(omp.omp_get_mapped_ptr(_p(p), device_number(dev)) or 0))
    ext("omp_target_alloc", ffi.NULL)(
        lambda size, dev: _ptr(_alloc(omp.omp_target_alloc, size, dev)))
    ext("omp_target_free")(lambda p, dev: _free(omp.omp_target_free, p, dev))
    for kind in ("device", "host", "shared"):
        ext(f"llvm_omp_target_alloc_{kind}", ffi.NULL)(
            _bind_alloc(getattr(omp, f"llvm_omp_target_alloc_{kind}")))
        ext(f"llvm_omp_target_free_{kind}")(
            _bind_free(getattr(omp, f"llvm_omp_target_free_{kind}")))
    ext("omp_target_is_present", 0)(
        lambda p, dev: omp.omp_target_is_present(_p(p), device_number(dev)))
    ext("omp_target_memcpy", OFFLOAD_FAIL)(_memcpy)
    ext("omp_target_memcpy_async", OFFLOAD_FAIL)(
        lambda d, s, n, do, so, dd, sd, cnt, lst: _after(cnt, lst, _memcpy, d, s, n, do, so,
                                                          dd, sd))
    ext("omp_target_memcpy_rect", OFFLOAD_FAIL)(_memcpy_rect)
    ext("omp_target_memcpy_rect_async", OFFLOAD_FAIL)(
        lambda d, s, es, nd, v, do, so, dd, sdim, ddev, sdev, cnt, lst:
        _after(cnt, lst, _memcpy_rect, d, s, es, nd, v, do, so, dd, sdim, ddev, sdev))
    ext("omp_target_memset", ffi.NULL)(_memset)
    ext("omp_target_memset_async", ffi.NULL)(
        lambda p, v, n, dev, cnt, lst: _after(cnt, lst, _memset, p, v, n, dev))
    ext("omp_target_associate_ptr", OFFLOAD_FAIL)(
        lambda h, d, size, off, dev: omp.omp_target_associate_ptr(
            _p(h), _p(d), size, off, load_device(dev)))
    ext("omp_target_disassociate_ptr", OFFLOAD_FAIL)(
        lambda h, dev: omp.omp_target_disassociate_ptr(_p(h), load_device(dev)))
    ext("llvm_omp_target_lock_mem", ffi.NULL)(_lock_mem)
    ext("llvm_omp_target_unlock_mem")(_unlock_mem)
    ext("llvm_omp_target_dynamic_shared_alloc", ffi.NULL)(lambda: ffi.NULL)
    ext("ompx_dump_mapping_tables")(omp_async.ompx_dump_mapping_tables)

    # interop objects: none of offload's host devices has a foreign runtime to hand out
    ext("__tgt_interop_init")(interop_init)
    ext("__tgt_interop_use")(interop_use)
    ext("__tgt_interop_destroy")(interop_destroy)
    ext("omp_get_interop_int", 0)(interop_int)
    ext("omp_get_interop_ptr", ffi.NULL)(interop_ptr)
    ext("omp_get_interop_str", ffi.NULL)(interop_str)
    ext("omp_get_interop_name", ffi.NULL)(interop_name)
    ext("omp_get_interop_type_desc", ffi.NULL)(interop_type_desc)

    ext("__tgt_set_info_flag")(_set_info)
    ext("__tgt_print_device_info", 0)(_print_device_info)
    ext("__tgt_activate_record_replay", OFFLOAD_FAIL)(_record_replay)




#: the exports that are constructs: a failure is LLVM's fatal error
CONSTRUCTS = frozenset(
    [f"__tgt_target_data_{k}{v}" for k in ("begin", "end", "update")
     for v in ("", "_nowait", "_mapper", "_nowait_mapper")]
    + ["__tgt_target_kernel", "__tgt_target_kernel_nowait", "__tgt_target_kernel_replay"]
    + [f"__tgt_target{t}{v}" for t in ("", "_teams")
       for v in ("", "_nowait", "_mapper", "_nowait_mapper")])


def _escaped(exc_type: Any, exc: BaseException, tb: Any) -> None:
    """cffi's handler for an exception the guard itself let out: never a silent 0."""
    sys.stderr.write(f"omptarget error: {describe(exc)}\n")
    fatal("an export of offload's libomptarget failed outside its guard")


def _devices_so_far() -> int:
    """omp_get_num_devices(): as LLVM 19, none in a C program before its first image
    registers (libomp asks while OMPT connects), without starting the runtime for it."""
    if (runtime._process.live is None and not registry.programs
            and getattr(sys, "_offload_capi_owns_python", False)):
        return 0
    return num_devices()


def _alloc(fn: Callable[[int, int], int], size: int, dev: int) -> int:
    return fn(size, load_device(dev)) or 0


def _free(fn: Callable[[Any, int], None], p: Any, dev: int) -> None:
    fn(_p(p), load_device(dev))


def _bind_alloc(fn: Callable[[int, int], int]) -> Callable[[int, int], Any]:
    return lambda size, dev: _ptr(_alloc(fn, size, dev))


def _bind_free(fn: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    return lambda p, dev: _free(fn, p, dev)


def _after(count: int, depobjs: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) once the async device API's depobj list is met, waited for through
    libomp (LLVM 19 makes the call a task with these dependences; offload runs it when
    they are met, before it returns): each omp_depend_t points at one kmp_depend_info_t."""
    if count > 0 and depobjs != ffi.NULL:
        _wait_depobjs(count, depobjs)
    return fn(*args)


def _wait_depobjs(count: int, depobjs: Any) -> None:
    if libomp is None:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"{count} dependence object(s) given, but "
                           f"libomp, which tracks them, is not loaded")
    objs = ffi.cast("void **", depobjs)
    infos = ffi.new("kmp_depend_info_t[]", count)
    for i in range(count):
        if objs[i] == ffi.NULL:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"dependence object {i} of {count} is NULL")
        infos[i] = ffi.cast("kmp_depend_info_t *", objs[i])[0]
    gtid = libomp.__kmpc_global_thread_num(ffi.NULL)
    libomp.__kmpc_omp_wait_deps(ffi.NULL, gtid, count, infos, 0, ffi.NULL)


# (device, pointer) -> how many locks of that host-device buffer were given back unpinned
_unpinned: dict[tuple[int, int], int] = {}


def _lock_mem(p: Any, size: int, dev: int) -> Any:
    """llvm_omp_target_lock_mem. On a host device a buffer the process may not pin (past
    RLIMIT_MEMLOCK) is used unpinned, its pointer returned with one warning, as LLVM 19's
    host plugin (whose lock pins nothing) returns it; its unlock is then a no-op. The
    Python API keeps the error (docs/semantics.md, "Pinned memory")."""
    n, host = load_device(dev), _p(p)
    d = device(n, construct=False) if 0 <= n < num_devices() else None
    if d is None or d.plugin.name != "host" or size <= 0:
        return _ptr(omp.llvm_omp_target_lock_mem(host, size, n))
    try:
        return _ptr(d.lock(host, int(size)))
    except OffloadError as exc:
        if exc.code is not ErrorCode.OUT_OF_RESOURCES:
            raise
        if not _unpinned:
            sys.stderr.write(f"omptarget warning: llvm_omp_target_lock_mem: {exc.message}; "
                             f"host device {n} uses the memory unpinned, as LLVM 19's host "
                             f"plugin does\n")
        _unpinned[(n, host)] = _unpinned.get((n, host), 0) + 1
        return p


def _unlock_mem(p: Any, dev: int) -> None:
    n, host = load_device(dev), _p(p)
    left = _unpinned.get((n, host))
    if left is None:
        omp.llvm_omp_target_unlock_mem(host, n)
    elif left > 1:
        _unpinned[(n, host)] = left - 1
    else:
        del _unpinned[(n, host)]


def _memcpy(d: Any, s: Any, n: int, do: int, so: int, dd: int, sd: int) -> int:
    return omp.omp_target_memcpy(_p(d), _p(s), n, do, so, load_device(dd), load_device(sd))


def _memcpy_rect(d: Any, s: Any, es: int, nd: int, vol: Any, doff: Any, soff: Any,
                 ddim: Any, sdim: Any, ddev: int, sdev: int) -> int:
    if d == ffi.NULL and s == ffi.NULL:        # the query form: the largest rank
        return omp.INT_MAX

    def ints(p: Any) -> list[int]:
        return [int(p[i]) for i in range(nd)] if p != ffi.NULL else []
    return omp.omp_target_memcpy_rect(_p(d), _p(s), es, nd, ints(vol), ints(doff), ints(soff),
                                      ints(ddim), ints(sdim), load_device(ddev), load_device(sdev))


def _memset(p: Any, v: int, n: int, dev: int) -> Any:
    return _ptr(omp_async.omp_target_memset(_p(p), v, n, load_device(dev)) or 0)


def _nowait_query(handle: Any) -> None:
    """offload completes target tasks before their entry points return: nothing pends."""
    if handle != ffi.NULL:
        ffi.cast("void **", handle)[0] = ffi.NULL


def _record_replay(dev: int, size: int, vaddr: Any, is_record: bool, save_output: bool,
                   offset: Any) -> int:
    """__tgt_activate_record_replay, as LLVM 19's RecordReplayTy: `size` bytes reserved on
    the device (at `vaddr` where it can) and every later allocation made in them; while
    recording, each kernel launch writes its description, image and memory (and with
    `save_output` the memory after it), which llvm-omp-kernel-replay replays; while
    replaying, __tgt_target_kernel_replay's memory lands at the block's start (and with
    `save_output` the memory after the kernel is written). *offset: how far the block
    lies below `vaddr` (the replay moves pointer arguments by it)."""
    d = device(dev, construct=False)
    if d is None:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"record/replay on device {dev}: not for the initial device")
    off = d.generic.start_record_replay(int(size), _p(vaddr), bool(is_record),
                                        bool(save_output))
    if offset != ffi.NULL:
        ffi.cast("uint64_t *", offset)[0] = off
    return OFFLOAD_SUCCESS


def _set_info(flags: int) -> None:
    """__tgt_set_info_flag: LIBOMPTARGET_INFO's bits for every device (a tool listening
    keeps the tables traced)."""
    for d in ensure_runtime().manager.initialized():
        d.table.info = int(flags) | (d.table.info & TRACED)


def _print_device_info(dev: int) -> int:
    d = device(dev)
    if d is None:
        return 0
    sys.stderr.write(f"Device {d.number} ({d.plugin.name}):\n")
    for k, v in d.info().items():
        sys.stderr.write(f"    {k}: {v}\n")
    return 1




__all__ = ["bind"]
