"""Target regions: map, launch, unmap; kernel arguments from mappings; host fallback."""
from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Literal, overload

from ._lazy import numpy as np
from .arrays import span
from .clauses import MapClause, MapItem, MapType, alloc, map_items
from .config import Info, TargetOffload
from .device import Device
from .dlpack import foreign_pointer, is_foreign
from .errors import ErrorCode, OffloadError, OffloadWarning
from .image import Binary, Kernel
from .mapping import MappingTable
from .mapping.region import Region
from .nowait import Handle, check_depend, queue_after, stream_queue, wait_depend
from .plugins.args import check_kernel_call
from .plugins.common import GenericKernel, GenericPlugin
from .runtime import current as _current
from .runtime import operation

_I_KERNEL = int(Info.PLUGIN_KERNEL)                # plain ints: fast tests
_I_EXISTS = int(Info.MAPPING_EXISTS)


def overlaps(p: int, n: int, q: int, m: int) -> bool:
    """Whether [p, p+n) and [q, q+m) share a byte (an empty range counts as its first byte)."""
    return q < p + max(n, 1) and p < q + max(m, 1)


@overload
def target(kernel: Kernel, *args: Any, map: Sequence[Any] = ..., device: int | None = ...,
           teams: int | None = ..., threads: int | None = ..., shared_mem: int = ...,
           nowait: Literal[False] = ..., stream: Any = ...,
           depend: Sequence[Handle] = ...) -> None: ...
@overload
def target(kernel: Kernel, *args: Any, map: Sequence[Any] = ..., device: int | None = ...,
           teams: int | None = ..., threads: int | None = ..., shared_mem: int = ...,
           nowait: Literal[True], stream: Any = ...,
           depend: Sequence[Handle] = ...) -> Handle: ...
@overload
def target(kernel: Kernel, *args: Any, map: Sequence[Any] = ..., device: int | None = ...,
           teams: int | None = ..., threads: int | None = ..., shared_mem: int = ...,
           nowait: bool, stream: Any = ..., depend: Sequence[Handle] = ...) -> Handle | None: ...


@operation
def target(kernel: Kernel, *args: Any, map: Sequence[Any] = (), device: int | None = None,
           teams: int | None = None, threads: int | None = None, shared_mem: int = 0,
           nowait: bool = False, stream: Any = None,
           depend: Sequence[Handle] = ()) -> Handle | None:
    """Run `kernel` on a device: map, launch, unmap (`#pragma omp target`).

    Array arguments become the device address of their first element through the
    mapping that holds them; arrays no clause or mapping covers are mapped `tofrom`
    for the region. An int passed for a pointer parameter is taken as a device
    address (is_device_ptr), and so is a foreign device array (CuPy, PyTorch: CUDA Array
    Interface or DLPack), once the work its stream holds has finished. Scalars pass by
    value, typed by the kernel's parameters.

    Args:
        kernel: a kernel of an image, e.g. `image.add_one`.
        *args: the kernel's arguments: arrays, ints, floats.
        map: map clauses (`to(a)`, `tofrom(a[10:20])`, ...) or bare arrays (`tofrom`).
        device: device number; None for the default device. The initial device, or a
            device without a binary for the kernel, runs the host binary.
        teams: the grid size on a GPU (ignored on the host).
        threads: the block size on a GPU (ignored on the host).
        shared_mem: bytes of dynamic shared memory for the kernel (`extern __shared__` on
            CUDA, dynamic LDS on AMDGPU; ignored on the host).
        nowait: return at once with a Handle; read the arrays only after `wait()`.
        depend: Handles of earlier nowait work to run after (OpenMP's depend clause).
        stream: an `offload.Stream` (`offload.stream(device)`): run the region's copies
            and kernel on it, after the work CuPy or PyTorch queued there.

    Returns:
        None, or a Handle with `nowait=True`.

    Raises:
        OffloadError: INVALID_ARGUMENT for a bad clause or argument, INVALID_VALUE for
            a device number that is not a device, INVALID_BINARY when the kernel cannot
            run anywhere asked, driver errors as BACKEND_FAILURE. Nothing stays mapped.

    Example:
        >>> offload.target(k.add_one, a, 0, a.size, map=[offload.tofrom(a)])
    """
    if type(map) is not list and type(map) is not tuple:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"target: map: expected a list of map clauses, got "
                           f"{type(map).__name__}; write map=[tofrom(a)]")
    rt = _current()
    deps = check_depend(depend, "target: depend") if depend else ()
    dev = rt.construct_device(device)
    scratch: Sequence[Any] = ()             # a Python kernel's reduction scratch arrays
    if not isinstance(kernel, Kernel):
        bind = getattr(type(kernel), "__offload_kernel__", None)   # a Python kernel
        if bind is None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"target: expected a kernel (image.name or an "
                               f"@offload.kernel function), got {type(kernel).__name__}")
        kernel, args, teams, threads, scratch = bind(kernel, args, dev, teams, threads)
        if scratch and (nowait or stream is not None):     # mapped for the region
            map = [*map, *(alloc(s, name="reduction scratch") for s in scratch)]
            scratch = []
    for a in args:
        t = type(a)
        if t is not np.ndarray and t is not int and t is not float and is_foreign(a):
            args = _device_pointers(args, dev)
            break
    queue = stream_queue(stream, dev, "target") if stream is not None else None
    k = dev.kernel_for(kernel) if dev is not None else None
    if dev is not None and k is None:
        if rt.config.target_offload is TargetOffload.MANDATORY:
            dev.check_binary(kernel)              # raises, naming what the image holds
        _report_fallback(kernel, dev)
        dev = None
    if dev is None:
        plugin = rt.manager.initial_plugin()
        binary = host_binary(kernel, plugin)
        plugin.check_launch(0, binary, kernel.name, args)
        if nowait:
            return rt.nowait.spawn(run_on_host, kernel, args, teams, threads, depend=deps)
        wait_depend(deps)
        run_on_host(kernel, args, teams, threads)
        return None
    assert k is not None
    check_kernel_call(k, args)
    if nowait and queue is not None:        # on the stream, after deps: nothing blocks
        queue_after(deps, dev.generic, queue)
        busy = _target(k, args, map, dev, teams, threads, shared_mem, queue, on_stream=True)
        return rt.nowait.watch(dev.generic, queue,
                               functools.partial(dev.table.release_busy, busy or []))
    if nowait:
        return rt.nowait.spawn(_region, k, args, map, dev, teams, threads, shared_mem, queue,
                               depend=deps)
    if deps:
        wait_depend(deps)
    if scratch:
        _with_scratch(k, args, map, dev, teams, threads, shared_mem, scratch)
        return None
    if queue is None and _quick(k, args, map, dev, teams, threads, shared_mem):
        return None
    _target(k, args, map, dev, teams, threads, shared_mem, queue)
    return None


def _with_scratch(k: GenericKernel, args: Sequence[Any], maps: Sequence[Any], dev: Device,
                  teams: int | None, threads: int | None, shared_mem: int,
                  scratch: Sequence[Any]) -> None:
    """A synchronous region of a Python kernel that reduces: its scratch arrays are
    device memory (from the device's pool), passed by address and given back when the
    region ends, so that the region takes the quick paths when its arrays are mapped."""
    held: dict[int, int] = {}
    done = False
    try:
        for s in scratch:
            held[id(s)] = dev.alloc(max(1, s.nbytes))
        args = tuple(held.get(id(a), a) if type(a) is np.ndarray else a for a in args)
        if not _quick(k, args, maps, dev, teams, threads, shared_mem):
            _target(k, args, maps, dev, teams, threads, shared_mem, None)
        done = True
    finally:
        for addr in held.values():  # idle once the launches ended; else wait before reuse
            dev.free(addr, idle=done)


def _region(k: GenericKernel, args: Sequence[Any], maps: Sequence[Any], dev: Device,
            teams: int | None, threads: int | None, shared_mem: int, queue: Any) -> None:
    """A nowait region (not queued on a Stream): the quick paths where they apply, else
    _target."""
    if queue is None and _quick(k, args, maps, dev, teams, threads, shared_mem):
        return
    _target(k, args, maps, dev, teams, threads, shared_mem, queue)


def _quick(k: GenericKernel, args: Sequence[Any], maps: Sequence[Any], dev: Device,
           teams: int | None, threads: int | None, shared_mem: int) -> bool:
    """The two common regions without a caller's queue, in fewer steps: every array
    argument mapped already, or one single-range clause on a synchronous device. False, with
    nothing done, for any other region."""
    table = dev.table
    if table.observed:
        return False
    if not maps:
        return _target_on_present(k, args, dev, teams, threads, shared_mem)
    # one single-range clause (TO/FROM bits only, over a C-contiguous array that is the
    # region's only array argument) on a device whose work is synchronous
    if len(maps) != 1 or type(maps[0]) is not MapClause or not dev.generic.queues.synchronous:
        return False
    single = table.single_range_of(maps[0])
    if single is None:
        return False
    p, n, t, arr, read_only = single
    for a in args:
        if type(a) is np.ndarray and a is not arr:
            return False
    gen = dev.generic
    call = gen.direct_call(k, shared_mem) if len(args) == 1 and args[0] is arr else None
    if call is not None:                      # the kernel called with the array's address
        Region.single_range(table, p, n, t, arr, read_only, call)
    else:
        Region.single_range(table, p, n, t, arr, read_only, _launch_single, k, args, arr,
                            gen, teams, threads, shared_mem)
    return True


def _device_pointers(args: Sequence[Any], dev: Device | None) -> tuple[Any, ...]:
    """Foreign device arrays as device addresses (is_device_ptr)."""
    out = []
    for i, a in enumerate(args):
        if is_foreign(a):
            if dev is None:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"target: argument {i} is a device array "
                                   f"({type(a).__name__}) but the region runs on the initial "
                                   f"device; name the device that holds it with device=")
            found = foreign_pointer(a)
            assert found is not None
            a = found.address
        out.append(a)
    return tuple(out)


def _report_fallback(kernel: Kernel, dev: Device) -> None:
    """Say once per image and device that a kernel runs on the host instead."""
    if not dev.note_fallback(kernel.image):
        return
    kinds = ", ".join(b.describe() for b in kernel.image.binaries)
    msg = (f"kernel '{kernel.name}' has no binary for device {dev.number} ({dev.plugin.name}); "
           f"running it on the host (the image holds: {kinds}). Set "
           f"OMP_TARGET_OFFLOAD=mandatory to make this an error")
    warnings.warn(msg, OffloadWarning, stacklevel=3)
    if dev.table.info:
        print(f"omptarget device {dev.number} info: {msg}", file=sys.stderr)


_TOFROM = MapType.TO | MapType.FROM
_IMPLICIT_TOFROM = MapType.TO | MapType.FROM | MapType.IMPLICIT


def _target(k: GenericKernel, args: Sequence[Any], maps: Sequence[Any], dev: Device,
            teams: int | None, threads: int | None, shared_mem: int = 0,
            stream_queue: Any = None, on_stream: bool = False) -> list | None:
    """The region, launching `k` (`args` checked by check_kernel_call); `on_stream`:
    its work is only queued on `stream_queue`, and the entries it uses stay marked in
    use, returned for `release_busy` once the queue ran (an entry the region unmaps
    still waits for the queue before it is freed)."""
    table = dev.table
    items = map_items(maps, _TOFROM, "target: map") if maps else []
    # each array argument: the clause naming it (its index), else its span, in use by the
    # region where another construct maps it, else mapped tofrom for the region
    where: list[tuple[int, int, int] | None] = []
    loose: list[tuple[int, int, int]] = []    # (index, span) of those no clause covers
    for a in args:
        if not isinstance(a, np.ndarray):
            where.append(None)
            continue
        j = 0
        for it in items:
            if it.owner is a:
                where.append((j, it.host, it.size))
                break
            j += 1
        else:
            p, n = span(a)
            if not any(overlaps(p, n, i.host, i.size) for i in items):
                loose.append((len(where), p, n))
            where.append((-1, p, n))
    kept: list = []
    region = Region(table)
    try:
        # found and marked in use in one step: another thread's delete waits for the region
        found = table.mark_busy_found([(p, n) for _, p, n in loose]) if loose else []
        region.hold(found)
        held: dict[int, Any] = {}
        for (i, p, n), e in zip(loose, found, strict=True):
            if e is not None:
                held[i] = e
                continue
            a = args[i]
            j = next((j for j, it in enumerate(items) if it.owner is a), len(items))
            if j == len(items):
                items.append(MapClause(a, _IMPLICIT_TOFROM).item())
            where[i] = (j, p, n)
        with dev.queue(stream_queue) as queue:
            # the region's entries stay while its kernel runs, even if another thread
            # deletes them (map(delete) drops our reference too)
            region.queue = queue
            tgts = region.map(items)
            try:
                kargs = []
                for i, (a, w) in enumerate(zip(args, where, strict=True)):
                    if w is None:                          # a scalar, by value
                        kargs.append(_by_value(a))
                    elif w[0] >= 0 and w[2]:               # its clause's device address
                        kargs.append(tgts[w[0]] + (w[1] - items[w[0]].host))
                    elif i in held:                        # mapped by another construct
                        kargs.append(held[i].tgt_begin + (w[1] - held[i].hst_begin))
                    else:                                  # inside a clause's mapping
                        kargs.append(kernel_arg(table, items, w[1], w[2]))
                if table.info & _I_EXISTS:         # the arguments' lookups, as LLVM's
                    for w in where:
                        if w is not None:
                            table.say_found(w[1], w[2])
                if table.info & _I_KERNEL:
                    print(f"omptarget device {dev.number} info: Launching kernel "
                          f"{k.name} with {teams or 1} blocks and "
                          f"{threads or 'default'} threads, {len(kargs)} argument(s)",
                          file=sys.stderr)
                dev.generic.launch(k, kargs, teams, threads, queue, shared_mem)
            except BaseException as exc:
                if stream_queue is not None and isinstance(exc, Exception):
                    with contextlib.suppress(Exception):   # as a queue of ours would
                        dev.synchronize(stream_queue)
                region.unmap(copy_back=False)
                raise
            region.unmap()
            if stream_queue is not None and not on_stream:
                dev.synchronize(stream_queue)      # a queue of ours would sync on exit
            if on_stream:
                kept = region.keep()               # released once the stream ran
    finally:
        region.release()                           # the queue has drained
    if table.info:
        table.dump_if_asked()
    return kept if on_stream else None


def _launch_single(tgt: int, k: GenericKernel, args: Sequence[Any], arr: Any, gen: Any,
                   teams: int | None, threads: int | None, shared_mem: int) -> None:
    """The kernel of a single-range region, `arr` passed as its device address `tgt`."""
    gen.launch(k, [tgt] if len(args) == 1 and args[0] is arr else
               [tgt if a is arr else _by_value(a) for a in args], teams, threads, None,
               shared_mem)


def _target_on_present(k: GenericKernel, args: Sequence[Any], dev: Device,
                       teams: int | None, threads: int | None, shared_mem: int) -> bool:
    """A region without clauses whose array arguments are all mapped already (the common
    case inside target_data): each entry marked in use and translated under one lock,
    the kernel launched. False, with nothing done, when an array is not mapped (the
    general path maps it)."""
    table = dev.table
    steps = table.steps
    present = steps.present
    if present is not None and type(args) is tuple:
        gen = dev.generic
        if gen.accel_launches and not k.phases:
            spec = k.fast_launch.get((teams, threads, shared_mem)) or \
                gen.accel_launch(k, teams, threads, shared_mem)
            launch = steps.launch_present
            if spec is not None and launch is not None and launch(args, spec):
                return True                   # in C: marked, translated, launched
        found = present(args)                 # in C: marked, translated (or None)
        if found is not None:
            try:
                dev.generic.launch(k, found.kernel_args, teams, threads, None, shared_mem)
            finally:
                steps.release_present(found.marked)
            return True
    spans = []
    for a in args:
        if type(a) is np.ndarray:
            spans.append(span(a))
        elif isinstance(a, np.ndarray):
            return False                         # a subclass: the general path
    busy = table.mark_busy_each(spans) if spans else []
    if busy is None:
        return False
    kargs = []
    j = 0
    for a in args:
        if type(a) is np.ndarray:
            e = busy[j]
            kargs.append(e.tgt_begin + (spans[j][0] - e.hst_begin))
            j += 1
        else:
            kargs.append(_by_value(a))
    if not busy:                                 # nothing marked: launched as it is
        dev.generic.launch(k, kargs, teams, threads, None, shared_mem)
        return True
    Region.on_marked(table, busy, dev.generic.launch, k, kargs, teams, threads, None,
                     shared_mem)
    return True


def kernel_arg(table: MappingTable, items: Sequence[MapItem], p: int, n: int) -> int:
    """The device address of the array argument at [p, p+n), from the clause (else
    mapping) that holds it."""
    e = None
    for it in items:
        if it.size and it.host < p + max(n, 1) and p < it.host + it.size:
            e = table.lookup(it.host, it.size)
            break
    if e is None and n == 0:            # a zero-size array: inside a mapping, or NULL, as
        e = table.lookup(p, 1)          # LLVM's getTargetPointer gives an absent one
        if e is None:
            return 0
    if e is None:
        e = table.overlapping(p, n)
    if e is None:
        raise OffloadError(ErrorCode.NOT_FOUND,
                           f"kernel argument at 0x{p:x} ({n} bytes) is no longer mapped "
                           f"(another thread unmapped it); map it in the region's clauses")
    return e.tgt_begin + (p - e.hst_begin)


def _by_value(a: Any) -> Any:
    """A scalar argument as the kernel takes it (numpy scalars as Python numbers)."""
    return a.item() if isinstance(a, np.generic) else a


def host_binary(kernel: Kernel, plugin: GenericPlugin) -> Binary:
    """The binary of `kernel`'s image the host runs (INVALID_BINARY when none)."""
    binary = next((b for b in kernel.image.binaries if plugin.is_valid_binary(b)), None)
    if binary is None:
        why = "; ".join(f"{r.name}: {r.reason}" for r in _current().manager.records
                        if not r.num_devices and r.reason)
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"kernel '{kernel.name}' has no host binary to run on the initial "
                           f"device; combine a compile_c image into it with Image.combine"
                           + (f" (no offload device: {why})" if why else ""))
    return binary


def run_on_host(kernel: Kernel, args: Sequence[Any], teams: int | None,
                threads: int | None) -> None:
    """Run `kernel`'s host binary on the initial device (host fallback)."""
    plugin = _current().manager.initial_plugin()
    binary = host_binary(kernel, plugin)
    conv = [span(a)[0] if isinstance(a, np.ndarray) else _by_value(a) for a in args]
    plugin.launch_kernel(0, binary, kernel.name, conv, teams, threads)
