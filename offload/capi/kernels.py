"""Kernel launches at the C API: the region's map list applied, the kernel of its
image on the device run (a host function called as kernel(~0, args...), or an nvptx
kernel launched with LLVM 19's geometry), the list undone."""
from __future__ import annotations

import sys
from typing import Any

from ..diagnostics import say
from ..errors import ErrorCode, OffloadError
from ..plugins import _cuda_openmp
from . import maps
from .devices import OFFLOAD_FAIL, OFFLOAD_SUCCESS, cuda_image, device, fatal, registry
from .images import _cast, addr, ffi

_FN_TYPES: dict[int, Any] = {}
_CALLABLE: dict[tuple[int, int], Any] = {}     # (address, arguments) -> cffi function
# (region id, device number) -> (registry version, (kernel, name))
_KERNELS: dict[tuple[int, int], tuple[int, tuple[Any, str]]] = {}
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
    `host_ptr` in `dev`'s copy of its image; cached until a program (un)registers."""
    key = (host_ptr, dev.number)
    cached = _KERNELS.get(key)
    if cached is not None and cached[0] == registry.version:
        return cached[1]
    prog, entry = registry.kernel(host_ptr)
    found: tuple[Any, str]
    if dev.plugin.name == "cuda" and "nvptx" in prog.images:
        found = (cuda_image(dev, prog)[0], entry.name)
    else:
        handle = registry.load(prog, dev.number)
        if handle is None:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"kernel '{entry.name}' has no image for device {dev.number} "
                               f"({dev.plugin.name})")
        found = (registry.symbol(handle, entry.name), entry.name)
    _KERNELS[key] = (registry.version, found)
    return found


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
        return OFFLOAD_SUCCESS
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
    return OFFLOAD_SUCCESS


_EMPTY: tuple[list[maps.Arg], list[maps.Arg]] = ([], [])


def construct_device(dev: int) -> Any:
    """The construct's device; a device that cannot run it stops the program after LLVM's
    message (the policy is mandatory once there are devices)."""
    try:
        return device(dev)
    except OffloadError as exc:
        sys.stderr.write(f"omptarget error: {exc.message}\n")
        fatal("failure of target construct while offloading is mandatory")
        raise


def target_kernel(loc: Any, dev: int, num_teams: int, thread_limit: int, host_ptr: Any,
                  kargs: Any) -> int:
    d = construct_device(dev)
    if d is None:
        return OFFLOAD_FAIL                   # the host fallback runs the region
    k = _cast(_T_KARGS, kargs)
    n = k.NumArgs
    args = maps.decode(n, k.ArgBasePtrs, k.ArgPtrs, k.ArgSizes, k.ArgTypes, k.ArgNames,
                       k.ArgMappers) if n else _EMPTY
    if d.table.info & 0x1:                       # LIBOMPTARGET_INFO: KERNEL_ARGS
        for line in maps.describe("kernel", loc, args[1]):
            say(d.number, line)
    try:
        return _launch(d, addr(host_ptr), args, k.ArgBasePtrs, num_teams, thread_limit,
                       int(k.Tripcount))
    except OffloadError as exc:
        sys.stderr.write(f"omptarget error: {exc.message}\n")
        fatal("failure of target construct while offloading is mandatory")
        return OFFLOAD_FAIL


def legacy_target(dev: int, host_ptr: Any, n: int, bases: Any, begins: Any, sizes: Any,
                   types: Any, names: Any = None, mappers: Any = None) -> int:
    d = construct_device(dev)
    if d is None:
        return OFFLOAD_FAIL
    args = maps.decode(n, bases, begins, sizes, types, names, mappers)
    try:
        return _launch(d, addr(host_ptr), args, bases)
    except OffloadError as exc:
        sys.stderr.write(f"omptarget error: {exc.message}\n")
        fatal("failure of target construct while offloading is mandatory")
        return OFFLOAD_FAIL
