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
from ..runtime import operation
from ..statistics import write_stats
from . import hot_regions, maps, ompt
from .abi import DATA_EXPORTS, EXPORTS, FIRST_STEPS, KERNEL_GENERAL
from .data import _data, data_one
from .data import kept_failed as kept_data_failed
from .device_api import (
    _after,
    _alloc,
    _bind_alloc,
    _bind_free,
    _devices_so_far,
    _free,
    _lock_mem,
    _memcpy,
    _memcpy_rect,
    _memset,
    _nowait_query,
    _p,
    _print_device_info,
    _ptr,
    _record_replay,
    _set_info,
    _unlock_mem,
)
from .devices import (
    OFFLOAD_FAIL,
    construct_failed,
    describe,
    device,
    device_number,
    ensure_runtime,
    fatal,
    forget_program,
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
    dump_tables_at_exit,
    kept_failed,
    kernel_many,
    kernel_one,
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
    first = FIRST_STEPS.get(name)                # a first step: the export that called it
    decl = first[0] if first else EXPORTS.get(name, "")
    located = decl.split("(", 1)[-1].startswith("void *loc")

    def call(*args: Any) -> Any:
        p = None
        try:
            if _inject:
                export = first[1][args[1]] if first else name
                if export in _inject:
                    raise RuntimeError(f"failure injected into {export}")
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


# ---- the OpenMP device API, through offload.omp with pointers as ints ----------------------
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

    lib_ffi.def_extern(name="_offload_data_one", onerror=_escaped)(
        _guard("data_one", 1, data_one, True, True))
    lib_ffi.def_extern(name="_offload_kernel_one", onerror=_escaped)(
        _guard("kernel_one", OFFLOAD_FAIL, kernel_one, True, True))
    lib_ffi.def_extern(name="_offload_kernel_many", onerror=_escaped)(
        _guard("kernel_many", OFFLOAD_FAIL, kernel_many, True, True))
    if lib is not None and _profile is None:     # kept constructs run by the compiled core
        def at_loc(guarded):
            """The kept failure's callback: the core passes `loc` as an integer."""
            return lambda loc, export, exc: guarded(lib_ffi.cast("void *", loc), export, exc)
        hot_regions.connect(
            lib.offload_set_hot,
            at_loc(_guard("kernel_many", OFFLOAD_FAIL, kept_failed, False, True)),
            KERNEL_GENERAL, _inject,
            at_loc(_guard("data_one", None, kept_data_failed, False, True)),
            "".join(kind[0] for _, kind in DATA_EXPORTS).encode())
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


__all__ = ["bind"]
