"""Kernel launches at the C API: the region's map list applied, the kernel of its
image on the device run (a host function called as kernel(~0, args...), or an nvptx
kernel launched with LLVM 19's geometry), the list undone."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from .. import runtime
from ..diagnostics import dump_table, plugin_say, say
from ..errors import ErrorCode, OffloadError
from ..mapping.region import Region
from . import hot_regions, maps, ompt
from .abi import KERNEL_GENERAL
from .devices import (
    OFFLOAD_FAIL,
    OFFLOAD_SUCCESS,
    construct_failed,
    device,
    device_number,
    ensure_runtime,
    registry,
)
from .images import _T_UINTPTR, _cast, addr, ffi

# (region id, device number) -> (registry version, (loaded program, kernel name))
_KERNELS: dict[tuple[int, int], tuple[int, tuple[Any, str]]] = {}
_T_KARGS = ffi.typeof("KernelArgsTy *")


def _kernel(dev: Any, host_ptr: int) -> tuple[Any, str]:
    """(the loaded program, name) of the kernel of region `host_ptr` on `dev`; cached
    until a program (un)registers."""
    key = (host_ptr, dev.number)
    cached = _KERNELS.get(key)
    if cached is not None and cached[0] == registry.version:
        return cached[1]
    prog, entry = registry.kernel(host_ptr)
    kind = dev.plugin.omp_image_kind
    image = prog.images.get(kind) if kind else None
    if image is None:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"kernel '{entry.name}' has no image for device {dev.number} "
                           f"({dev.plugin.name})")
    found = (dev.generic.omp_load(image), entry.name)
    _KERNELS[key] = (registry.version, found)
    return found


def _run_kernel(dev: Any, program: Any, name: str, kargs: list[int], teams: int,
                threads: int, tripcount: int) -> None:
    if ompt.listening:
        with ompt.submit():
            blocks, block, mode = dev.generic.omp_launch(program, name, kargs, teams,
                                                         threads, tripcount)
    else:
        blocks, block, mode = dev.generic.omp_launch(program, name, kargs, teams, threads,
                                                     tripcount)
    if dev.table.info & 0x10:                    # LIBOMPTARGET_INFO: PLUGIN_KERNEL
        plugin_say(dev.local_id, f"Launching kernel {name} with {blocks} blocks and "
                                 f"{block} threads in {mode} mode")


def _run_with_args(dev: Any, fn: Any, name: str, given: list[maps.Arg], teams: int,
                   threads: int, tripcount: int) -> None:
    """The kernel with the arguments its mapped components give; privates freed after."""
    kargs, private = maps.kernel_args(dev, given)
    try:
        _run_kernel(dev, fn, name, kargs, teams, threads, tripcount)
    finally:
        for p in private:
            dev.free(p)


def _launch(dev: Any, host_ptr: int, decoded: tuple[list[maps.Arg], list[maps.Arg]],
            bases: Any, teams: int = -1, threads: int = -1, tripcount: int = 0) -> int:
    args, given = decoded
    fn, name = _kernel(dev, host_ptr)
    if not args:                                 # nothing mapped, nothing passed
        _run_kernel(dev, fn, name, [], teams, threads, tripcount)
        return OFFLOAD_SUCCESS
    one = maps.single_section_arg(dev, args)
    if one is not None:                          # one array section: in fewer steps
        _on_section(dev, one.begin, one.size, one.type, _run_one, one, dev, fn, name, given,
                    teams, threads, tripcount)
    else:
        _run_mapped(dev, fn, name, args, given, bases, teams, threads, tripcount)
    return OFFLOAD_SUCCESS


def _run_one(tgt: int, one: maps.Arg, dev: Any, fn: Any, name: str, given: list[maps.Arg],
             teams: int, threads: int, tripcount: int) -> None:
    """The kernel of a region whose one section `one` is mapped at `tgt`."""
    one.tgt = tgt
    _run_with_args(dev, fn, name, given, teams, threads, tripcount)


def _run_mapped(dev: Any, fn: Any, name: str, args: list[maps.Arg], given: list[maps.Arg],
                bases: Any, teams: int, threads: int, tripcount: int) -> None:
    """The kernel of a region whose map list the general rules map (maps.begin / end)."""
    with Region(dev.table) as region:   # its entries stay while its kernel runs (as target())
        region.map_by(lambda busy: maps.begin(dev, args, bases, busy),
                      lambda items, copy_back, own: maps.end(dev, args, items, own, copy_back))
        _run_with_args(dev, fn, name, given, teams, threads, tripcount)


_EMPTY: tuple[list[maps.Arg], list[maps.Arg]] = ([], [])


def dump_tables(dev: Any, loc: Any) -> None:
    """LIBOMPTARGET_INFO's DUMP_TABLE after a construct on `dev`: every device's table,
    as LLVM 19 prints them (the construct's file:line:col; a line for an empty one)."""
    if dev.table.info & 0x4:
        _dump(maps.location(loc), reverse=False)


def dump_tables_at_exit() -> None:
    """DUMP_TABLE when the last program unregisters: LLVM 19 dumps each device's table as
    it destroys the devices, last first, 'after block at libomptarget:0:0'."""
    rt = runtime._process.live
    if rt is not None and not rt.closing and int(rt.config.info) & 0x4:
        _dump("libomptarget:0:0", reverse=True)


def _dump(where: str, reverse: bool) -> None:
    rt = ensure_runtime()
    numbers = range(rt.num_devices())
    for n in reversed(numbers) if reverse else numbers:
        d = rt.manager.get_device(n)
        print(dump_table(d.number, d.table.entries(), where), file=sys.stderr)


def construct_device(dev: int) -> Any:
    """The construct's device; a device that cannot run it stops the program after LLVM's
    message (the policy is mandatory once there are devices)."""
    try:
        return device(dev)
    except OffloadError as exc:
        construct_failed(None, exc)
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
        if ompt.listening:
            with ompt.region(ompt.TARGET, d.number, k):
                rc = _launch(d, addr(host_ptr), args, k.ArgBasePtrs, num_teams, thread_limit,
                             int(k.Tripcount))
        else:
            rc = _launch(d, addr(host_ptr), args, k.ArgBasePtrs, num_teams, thread_limit,
                         int(k.Tripcount))
        dump_tables(d, loc)
        return rc
    except OffloadError as exc:
        construct_failed(loc, exc, target=True)
        return OFFLOAD_FAIL


def _on_present(dev: Any, host_ptr: int, n: int, bases: int, begins: int, sizes: int,
                types: int, mappers: int, teams: int, threads: int, tripcount: int,
                hot: hot_regions.Key | None = None) -> bool:
    """A region whose map list lies on mapped data (the compiled core's present_map: no
    mapper, nothing to copy, attach or allocate) run with its mappings marked in use, in
    one step, the launch too where the device plans it (omp_launch_plan:
    launch_present_map); a list with one plain section not yet mapped (a reduction's
    scalar) maps that section first (Region.single_range) and runs the rest so. False
    with nothing done (the general rules map the list). Not while OMPT listens (its data
    callbacks come from the general rules). A region that ran so is kept under `hot`
    (hot_regions), if given, when the core launched it or its kernel can be called
    directly."""
    steps = dev.table.steps
    if steps.present_map is None or ompt.listening:
        return False
    fn, name = _kernel(dev, host_ptr)
    arrays = (n, bases, begins, sizes, types, mappers)     # addresses (mappers 0: none)
    plan = dev.generic.omp_launch_plan(fn, name, teams, threads, tripcount)
    counts: list[int] = []                                 # the arguments omp_launch got

    def launch(kargs: list[int]) -> bool:
        _run_kernel(dev, fn, name, kargs, teams, threads, tripcount)
        counts.append(len(kargs))
        return True
    if not _present(dev, arrays, plan, launch):
        return False
    if hot is None:
        return True
    if not counts:                                   # the core launched it on `plan`
        hot_regions.keep(hot, dev, plan, None, 0)
        return True
    call = dev.generic.omp_direct_call(fn, name, counts[0], teams, threads)
    if call is not None:
        hot_regions.keep(hot, dev, None, call, counts[0])
    return True


def _run_kept(h: hot_regions.HotRegion, arrays: tuple[int, ...]) -> bool:
    """A region again as hot_regions kept it, on its map list `arrays`: _present with
    the kept plan or direct call. True once it ran; False with nothing done."""
    return _present(h.device, arrays, h.plan, h.launch)


def _present(dev: Any, arrays: tuple[int, ...], plan: Any,
             launch: Callable[[list[int]], bool]) -> bool:
    """The region of map list `arrays` on mapped data: launched by the core on `plan`,
    else `launch(kernel arguments)` with its mappings marked; a list with one plain
    section mapped nowhere maps it first and runs the rest so. True once it ran; False
    with nothing done (a section mapped first is undone, with no copy back)."""
    got = _attempt(dev, arrays, plan, launch)
    if not isinstance(got, tuple):
        return got
    base, begin, size, type_ = got                    # the one component to map first
    if not maps.single_section(dev, base, begin, size, type_):
        return False
    try:
        _on_section(dev, begin, size, type_, _attempt_inside, dev, arrays, plan, launch)
    except _NotPresent:
        return False                 # unmapped meanwhile: the general rules, afresh
    return True


def _attempt(dev: Any, arrays: tuple[int, ...], plan: Any,
             launch: Callable[[list[int]], bool]) -> bool | tuple:
    """_present's region when its whole list is mapped: True once it ran; False (the
    general rules) or present_map's component to map first, with nothing done."""
    steps = dev.table.steps
    if plan is not None:                      # in C: marked, translated, launched, waited
        ran = steps.launch_present_map(*arrays, plan.spec, plan.first, plan.scratch)
        if ran is not False:
            return False if ran is None else ran
    found = steps.present_map(*arrays)
    if found is None:
        return False
    if type(found) is tuple:
        return found
    try:
        return launch(found.kernel_args)
    finally:
        steps.release_present(found.marked)


def _on_section(dev: Any, begin: int, size: int, type: int, launch: Callable[..., Any],
                *args: Any) -> None:
    """Region.single_range over a plain section of a map list (maps.single_section):
    `launch(device address, *args)` with the section mapped by its TO/FROM bits."""
    Region.single_range(dev.table, begin, size, type & 0x3, None, False,   # TO, FROM
                        launch, *args)


class _NotPresent(Exception):
    """A list no longer on mapped data once its one section was mapped."""


def _attempt_inside(tgt: int, *attempt: Any) -> None:
    """_present's region once its one section is mapped (at `tgt`)."""
    if _attempt(*attempt) is not True:
        raise _NotPresent


def kernel_one(loc: Any, export: int, dev: int, num_teams: int, thread_limit: int,
               host_ptr: int, tripcount: int, n: int, base: int, begin: int, size: int,
               type: int) -> int:
    """A region (KERNEL_EXPORTS[export]) whose map list is empty or one component without
    a mapper, as the library's C body read it: the region run here when nothing watches
    the table (no OMPT tool, no LIBOMPTARGET_INFO: target_kernel's general path prints and
    reports) and the component is a single section (maps.single_section), whose one
    argument (TARGET_PARAM) is then its device address; KERNEL_GENERAL otherwise (the
    body then tries kernel_many)."""
    d = construct_device(dev)
    if d is None:
        return OFFLOAD_FAIL                   # the host fallback runs the region
    if ompt.listening or d.table.observed or \
            (n and not maps.single_section(d, base, begin, size, type)):
        return KERNEL_GENERAL
    try:
        fn, name = _kernel(d, host_ptr)
        gen = d.generic
        if not n:                                # nothing mapped, nothing passed
            gen.omp_launch(fn, name, [], num_teams, thread_limit, tripcount)
            if hot_regions.in_core(dev):         # the library's C runs it from now on
                _keep_empty(d, (dev, host_ptr, num_teams, thread_limit, tripcount), fn, name)
            return OFFLOAD_SUCCESS
        param = type & maps.TARGET_PARAM
        call = gen.omp_direct_call(fn, name, 1, num_teams, thread_limit) if param else None
        if call is not None:                     # called with the section's address
            _on_section(d, begin, size, type, call)
            if hot_regions.in_core(dev):         # the library's C runs it from now on
                hot_regions.keep((dev, host_ptr, num_teams, thread_limit, tripcount), d,
                                 None, call, 1)
        else:
            _on_section(d, begin, size, type, _run_section, gen, fn, name, param, num_teams,
                        thread_limit, tripcount)
        return OFFLOAD_SUCCESS
    except OffloadError as exc:
        construct_failed(loc, exc, target=True)
        return OFFLOAD_FAIL


def _keep_empty(d: Any, key: hot_regions.Key, fn: Any, name: str) -> None:
    """An empty region (no map list) kept as launched on `d`, for the compiled core's
    entry: its launch plan, else its direct call, when the device gives one."""
    gen = d.generic
    plan = gen.omp_launch_plan(fn, name, key[2], key[3], key[4])
    call = None if plan is not None else gen.omp_direct_call(fn, name, 0, key[2], key[3])
    if plan is not None or call is not None:
        hot_regions.keep(key, d, plan, call, 0)


def kernel_many(loc: Any, export: int, dev: int, num_teams: int, thread_limit: int,
                host_ptr: int, tripcount: int, n: int, bases: int, begins: int, sizes: int,
                types: int, mappers: int) -> int:
    """A region (KERNEL_EXPORTS[export]) with a map list that kernel_one did not take, its
    arrays by address: run here when nothing watches the table and the list lies on
    mapped data (_on_present); KERNEL_GENERAL otherwise."""
    key = (dev, host_ptr, num_teams, thread_limit, tripcount)
    try:
        h = hot_regions.find(key)
        if h is not None and _run_kept(h, (n, bases, begins, sizes, types, mappers)):
            return OFFLOAD_SUCCESS
    except OffloadError as exc:
        construct_failed(loc, exc, target=True)
        return OFFLOAD_FAIL
    d = construct_device(dev)
    if d is None:
        return OFFLOAD_FAIL
    if ompt.listening or d.table.observed:
        return KERNEL_GENERAL
    try:
        ran = _on_present(d, host_ptr, n, bases, begins, sizes, types, mappers, num_teams,
                          thread_limit, tripcount, key)
    except OffloadError as exc:
        construct_failed(loc, exc, target=True)
        return OFFLOAD_FAIL
    return OFFLOAD_SUCCESS if ran else KERNEL_GENERAL


def kept_failed(loc: Any, export: int, exc: BaseException) -> int:
    """What region KERNEL_EXPORTS[export] returns when the compiled core ran it as kept
    (hot_regions.connect) and the run raised `exc`: kernel_many's answer to it."""
    if isinstance(exc, OffloadError):
        construct_failed(loc, exc, target=True)
        return OFFLOAD_FAIL
    raise exc


def _run_section(tgt: int, gen: Any, fn: Any, name: str, param: int, teams: int,
                 threads: int, tripcount: int) -> None:
    """The kernel of kernel_one's one section, mapped at `tgt` (its base: the section
    starts there), passed when it is a kernel argument."""
    gen.omp_launch(fn, name, [tgt] if param else [], teams, threads, tripcount)


def target_replay(loc: Any, dev: int, host_ptr: Any, memory: Any, size: int, tgt_args: Any,
                  tgt_offsets: Any, num_args: int, teams: int, threads: int,
                  tripcount: int) -> int:
    """__tgt_target_kernel_replay, as LLVM 19's target_replay: the kernel of region
    `host_ptr` runs on the device with the `num_args` arguments tgt_args[i] +
    tgt_offsets[i] (after the launch environment, as a region's kernel gets it: what
    LLVM 19's runtime passes), once `size` bytes of `memory` were copied into a new
    device allocation; the call returns once it ran. The allocation is freed after
    (LLVM 19 keeps it)."""
    d = construct_device(dev)
    if d is None:
        return OFFLOAD_FAIL                   # not offloading to the initial device
    try:
        fn, name = _kernel(d, addr(host_ptr))
        args = [(int(_cast(_T_UINTPTR, tgt_args[i])) + int(tgt_offsets[i])) & (2**64 - 1)
                for i in range(num_args)]
        tgt = d.alloc(size) if size > 0 else 0
        try:
            if size > 0:
                d.submit(tgt, addr(memory), size)
            blocks, block, mode = d.generic.omp_launch(fn, name, args, teams, threads,
                                                       tripcount)
        finally:
            if tgt:
                d.free(tgt)
    except OffloadError as exc:
        construct_failed(loc, exc)
        return OFFLOAD_FAIL
    if d.table.info & 0x10:                      # LIBOMPTARGET_INFO: PLUGIN_KERNEL
        plugin_say(d.local_id, f"Launching kernel {name} with {blocks} blocks and "
                               f"{block} threads in {mode} mode")
    return OFFLOAD_SUCCESS


_pushed = threading.local()      # per thread: device number -> trip count pushed for it


def push_tripcount(dev: int, tripcount: int) -> None:
    """__kmpc_push_target_tripcount: the loop trip count of this thread's next legacy
    launch on `dev` (the geometry of a GPU's SPMD kernel follows it)."""
    counts = getattr(_pushed, "counts", None)
    if counts is None:
        counts = _pushed.counts = {}
    counts[device_number(dev)] = tripcount


def legacy_target(dev: int, host_ptr: Any, n: int, bases: Any, begins: Any, sizes: Any,
                  types: Any, names: Any = None, mappers: Any = None, teams: int = -1,
                  threads: int = -1) -> int:
    d = construct_device(dev)
    counts = getattr(_pushed, "counts", None)          # used up by this launch
    tripcount = counts.pop(device_number(dev), 0) if counts else 0
    if d is None:
        return OFFLOAD_FAIL
    try:
        if n and _on_present(d, addr(host_ptr), n, addr(bases), addr(begins), addr(sizes),
                             addr(types), 0 if mappers is None else addr(mappers), teams,
                             threads, tripcount):
            return OFFLOAD_SUCCESS
    except OffloadError as exc:
        construct_failed(None, exc, target=True)
        return OFFLOAD_FAIL
    args = maps.decode(n, bases, begins, sizes, types, names, mappers)
    try:
        with ompt.region(ompt.TARGET, d.number, teams=teams):
            return _launch(d, addr(host_ptr), args, bases, teams, threads, tripcount)
    except OffloadError as exc:
        construct_failed(None, exc, target=True)
        return OFFLOAD_FAIL
