"""What clang-19's OpenMP nvptx images need from the CUDA plugin (LLVM 19's
plugins-nextgen CUDA plugin and DeviceRTL conventions): the device environment and the
device memory pool written at load, the kernel environment read for the launch geometry,
and a kernel launch environment passed as argument 0 of every launch."""
from __future__ import annotations

import struct
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import locks
from .._lazy import numpy as np
from ..config import Config
from ..errors import ErrorCode, OffloadError
from . import launch_geometry
from ._cuda_driver import ffi
from .accel_specs import BOUNCE_BYTES, COPIER_STREAMS, OmpLaunchPlan, ReductionScratch
from .common import AllocKind
from .launch_geometry import EXEC_GENERIC, EXEC_GENERIC_SPMD, EXEC_SPMD, GridValues

CUDADevice = Any                   # plugins.cuda.CUDADevice (a layer above this module)
WARP = 32
DEFAULT_THREADS = 128              # LLVM's GV_Default_WG_Size for NVPTX
DEFAULT_TEAMS = 3200               # LLVM's GV_Default_Num_Teams for NVPTX
POOL_BYTES = 64 << 20              # __omp_rtl_device_memory_pool
_KEPT = 4096                       # geometries, plans kept per device (then forgotten, all)
_UNMADE: Any = object()
_SCRATCH_KEPT = 8                  # reduction environments kept per buffer size
_MODE_NAMES = {EXEC_GENERIC: "Generic", EXEC_SPMD: "SPMD", EXEC_GENERIC_SPMD: "Generic-SPMD"}


@dataclass(frozen=True)
class KernelEnvironment:
    """The first 28 bytes of `<kernel>_kernel_environment` (ConfigurationEnvironmentTy)."""

    exec_mode: int
    min_threads: int
    max_threads: int
    min_teams: int
    max_teams: int
    reduction_data_size: int
    reduction_buffer_length: int

    @classmethod
    def parse(cls, raw: bytes) -> KernelEnvironment:
        _generic_sm, _nested, mode, *ints = struct.unpack_from("<BBBx6i", raw)
        return cls(mode, *ints)


_lock = locks.new_lock()


@dataclass
class _DeviceState:
    """What one CUDA device keeps for OpenMP images: its device heap, the shared zeroed
    launch environment, kernel environments and indirect function tables by
    loaded module."""

    heap: int | None = None
    launch_env: int | None = None
    envs: dict[tuple[int, str], KernelEnvironment] = field(default_factory=dict)
    indirect: dict[int, dict[int, int]] = field(default_factory=dict)
    #: (image digest, kernel, num_teams, thread_limit, trip count) -> (blocks, threads):
    #: the geometry is a pure function of these once the image is loaded
    grids: dict[tuple[str, str, int, int, int], tuple[int, int]] = field(default_factory=dict)
    #: reduction buffer bytes -> (launch environment, buffer) pairs free for the next
    #: launch of a kernel that reduces (launch_environment, give_back)
    scratch: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: (image digest, kernel, num_teams, thread_limit, trip count) -> launch_plan's answer
    plans: dict[tuple[str, str, int, int, int], OmpLaunchPlan | None] = field(
        default_factory=dict)
    #: reduction buffer bytes -> the scratch of the core's launches (launch_plan)
    stream_scratch: dict[int, ReductionScratch] = field(default_factory=dict)


_STATES: weakref.WeakKeyDictionary[Any, _DeviceState] = weakref.WeakKeyDictionary()


def _state(dev: CUDADevice) -> _DeviceState:
    st = _STATES.get(dev)
    if st is None:
        with _lock:
            st = _STATES.setdefault(dev, _DeviceState())
    return st


def global_address(dev: CUDADevice, program: Any, name: str) -> tuple[int, int] | None:
    """(device address, size) of a module global, or None when the module has none."""
    dptr, size = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
    dev.activate()
    if dev.plugin.drv.lib.cuModuleGetGlobal_v2(dptr, size, program, name.encode()) != 0:
        return None
    return int(dptr[0]), int(size[0])


def _write(dev: CUDADevice, addr: int, data: bytes) -> None:
    buf = np.frombuffer(bytearray(data), dtype=np.uint8)
    dev.plugin.data_submit(dev.id, addr, buf.ctypes.data, len(data))


def _read(dev: CUDADevice, addr: int, n: int) -> bytes:
    buf = np.zeros(n, dtype=np.uint8)
    dev.plugin.data_retrieve(dev.id, buf.ctypes.data, addr, n)
    return buf.tobytes()


def _indirect_table(dev: CUDADevice, program: Any,
                    indirect: list[tuple[int, str]]) -> tuple[int, int]:
    """The indirect call table {host function, device function} sorted by host address
    (device functions read from the image's globals of the entries' names), on the
    device: (address, entries), (0, 0) for none."""
    pairs = []
    for host, name in indirect:
        g = global_address(dev, program, name)
        if g is not None and g[1] >= 8:
            pairs.append((host, struct.unpack("<Q", _read(dev, g[0], 8))[0]))
    if not pairs:
        return 0, 0
    pairs.sort()
    _state(dev).indirect[id(program)] = dict(pairs)
    table = dev.alloc(16 * len(pairs), AllocKind.DEVICE)
    _write(dev, table, b"".join(struct.pack("<QQ", h, d) for h, d in pairs))
    return table, len(pairs)


def indirect_functions(dev: CUDADevice, program: Any) -> dict[int, int]:
    """Host address -> device address of the image's `declare target indirect` functions."""
    return _state(dev).indirect.get(id(program), {})


def prepare(dev: CUDADevice, program: Any,
            indirect: tuple[tuple[int, str], ...] = ()) -> None:
    """Once per loaded image: DeviceEnvironmentTy into `__omp_rtl_device_environment`
    (with the indirect call table of `indirect`, (host address, entry name) pairs) and a
    device heap into `__omp_rtl_device_memory_pool` (LLVM 19's layouts)."""
    env = global_address(dev, program, "__omp_rtl_device_environment")
    if env is not None:
        sms = dev._attr("multiprocessors")
        clock_khz = dev._attr("clock rate")
        threads_per_sm = dev._attr("max threads per multiprocessor")
        table, count = _indirect_table(dev, program, list(indirect))
        data = struct.pack("<4I4Q", 0, dev.plugin.number_of_devices(), dev.id, 0,
                           clock_khz * 1000, table, count, sms * threads_per_sm)
        _write(dev, env[0], data[:env[1]])
    pool = global_address(dev, program, "__omp_rtl_device_memory_pool")
    if pool is not None:
        st = _state(dev)
        with _lock:
            heap = st.heap
            if heap is None:
                heap = st.heap = dev.alloc(POOL_BYTES, AllocKind.DEVICE)
        _write(dev, pool[0], struct.pack("<QQ", heap, POOL_BYTES)[:pool[1]])


def kernel_environment(dev: CUDADevice, program: Any, name: str) -> KernelEnvironment:
    cache = _state(dev).envs
    found = cache.get((id(program), name))
    if found is None:
        g = global_address(dev, program, f"{name}_kernel_environment")
        if g is None:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"kernel '{name}' has no kernel environment: not an OpenMP "
                               f"offload kernel of clang 19")
        found = cache[(id(program), name)] = KernelEnvironment.parse(_read(dev, g[0], 28))
    return found


def geometry(dev: CUDADevice, env: KernelEnvironment, num_teams: int, thread_limit: int,
             tripcount: int, kernel_max: int = 1024,
             config: Config | None = None) -> tuple[int, int]:
    """(blocks, threads per block) by LLVM 19's rule (plugins/launch_geometry.py) with
    NVPTX's grid values, this device's limits and the kernel's (its environment, and
    `kernel_max`: what its registers allow)."""
    gv = GridValues(WARP, DEFAULT_THREADS, DEFAULT_TEAMS, min(dev.max_block, kernel_max),
                    dev.max_grid)
    return launch_geometry.geometry(
        gv, config if config is not None else dev.plugin.config, env.exec_mode,
        env.max_threads, env.max_teams, num_teams, thread_limit, tripcount)


_PRINTS: dict[str, bool] = {}        # image digest -> whether it calls vprintf


def prints(binary: Any) -> bool:
    """Whether a kernel of the image may call device printf (CUDA's vprintf)."""
    found = _PRINTS.get(binary.digest)
    if found is None:
        found = _PRINTS[binary.digest] = b"vprintf" in binary.data
    return found


def flush_printf(dev: CUDADevice, binary: Any) -> None:
    """Device printf (CUDA's vprintf) reaches the host only at a synchronizing call,
    which polling for completion is not: after a kernel of an image that prints, one
    context synchronize (nothing is pending by then)."""
    if prints(binary):
        dev.activate()
        dev.plugin.drv.check(dev.plugin.drv.lib.cuCtxSynchronize(), "cuCtxSynchronize")


def launch_environment(dev: CUDADevice, env: KernelEnvironment,
                       blocks: int) -> tuple[int, tuple[int, int, int] | None]:
    """A KernelLaunchEnvironmentTy {u32 ReductionCnt, u32 ReductionIterCnt, void *Buffer}
    on the device (argument 0) and what to give back after the launch (give_back): for a
    kernel that reduces, one with a reduction buffer of its own for this launch and its
    counters 0 (kept by the device for the next launch of that size: LLVM 19 allocates
    both anew and writes the environment, leaving the buffer as allocated, since the
    device runtime's first teams copy their values into it before any team reads it);
    for any other, one zeroed environment per device, made once (nothing writes it),
    and nothing to give back."""
    st = _state(dev)
    if not env.reduction_data_size:
        if st.launch_env is not None:
            return st.launch_env, None
        with _lock:
            shared = st.launch_env
            if shared is None:
                shared = dev.alloc(16, AllocKind.DEVICE)
                _write(dev, shared, bytes(16))
                st.launch_env = shared
        return shared, None
    n = _reduction_bytes(env)
    with _lock:
        kept = st.scratch.get(n)
        pair = kept.pop() if kept else None
    if pair is None:
        pair = _new_scratch(dev, n)
    token = (n, *pair)
    try:
        _point(dev, *pair)
    except BaseException:
        give_back(dev, token)
        raise
    return pair[0], token


def give_back(dev: CUDADevice, token: tuple[int, int, int] | None) -> None:
    """A reduction's launch environment and buffer (launch_environment's token), once its
    launch has finished: kept for the next (at most _SCRATCH_KEPT of a size), else freed."""
    if token is None:
        return
    n, addr, buffer = token
    st = _state(dev)
    with _lock:
        kept = st.scratch.setdefault(n, [])
        keep = len(kept) < _SCRATCH_KEPT
        if keep:
            kept.append((addr, buffer))
    if not keep:
        _free_scratch(dev, [(addr, buffer)])


def _grid(dev: CUDADevice, binary: Any, env: KernelEnvironment, name: str,
          teams: int, threads: int, tripcount: int) -> tuple[int, int]:
    """`geometry` of a loaded kernel, kept by its arguments."""
    return _kept(_state(dev).grids, (binary.digest, name, teams, threads, tripcount),
                 lambda: geometry(dev, env, teams, threads, tripcount,
                                  dev.kernel(binary, name).handle[1]))


def launch_plan(dev: CUDADevice, binary: Any, name: str, teams: int, threads: int,
                tripcount: int) -> OmpLaunchPlan | None:
    """What `launch` does, as offload/accel_c launches it: the shared launch environment
    first (for a kernel that reduces, a stream's own environment and buffer from the
    device's ReductionScratch), LLVM 19's geometry; None for a kernel that needs more
    around its launch (indirect calls, device printf) or that the core cannot launch.
    Kept by its arguments (a device never unloads an image)."""
    return _kept(_state(dev).plans, (binary.digest, name, teams, threads, tripcount),
                 lambda: _plan(dev, binary, name, teams, threads, tripcount))


def _kept(cache: dict[Any, Any], key: Any, make: Callable[[], Any]) -> Any:
    """cache[key], made by make() the first time (all forgotten at _KEPT entries; one get:
    another thread may clear them)."""
    found = cache.get(key, _UNMADE)
    if found is _UNMADE:
        found = make()
        if len(cache) >= _KEPT:
            cache.clear()
        cache[key] = found
    return found


def _plan(dev: CUDADevice, binary: Any, name: str, teams: int, threads: int,
          tripcount: int) -> OmpLaunchPlan | None:
    program = dev.load(binary)
    if indirect_functions(dev, program) or prints(binary):
        return None
    env = kernel_environment(dev, program, name)
    blocks, block = _grid(dev, binary, env, name, teams, threads, tripcount)
    spec = dev.accel_launch(dev.kernel(binary, name), blocks, block, 0)
    if spec is None:
        return None
    if env.reduction_data_size:
        return OmpLaunchPlan(spec, 0, _stream_scratch(dev, _reduction_bytes(env)))
    return OmpLaunchPlan(spec, launch_environment(dev, env, blocks)[0])


def _reduction_bytes(env: KernelEnvironment) -> int:
    """The bytes of a launch's reduction buffer (LLVM 19: data size x buffer length),
    rounded up to 8 (the launch environment after it stays aligned)."""
    return -(-env.reduction_data_size * max(env.reduction_buffer_length, 1) // 8) * 8


def _stream_scratch(dev: CUDADevice, n: int) -> ReductionScratch:
    """The device's ReductionScratch for buffers of `n` bytes (launch_plan's), made once:
    an environment pointing at its own buffer for each copier stream, with BOUNCE_BYTES
    after it for a region's section."""
    st = _state(dev)
    found = st.stream_scratch.get(n)
    if found is not None:
        return found
    made: list[tuple[int, int]] = []
    try:                                   # made outside the lock (driver calls)
        for _ in range(COPIER_STREAMS):
            made.append(_new_scratch(dev, n, BOUNCE_BYTES))
            _point(dev, *made[-1])
    except BaseException:
        _free_scratch(dev, made)
        raise
    mine = ReductionScratch(tuple(e for e, _ in made), tuple(b for _, b in made), n,
                            BOUNCE_BYTES)
    with _lock:
        found = st.stream_scratch.setdefault(n, mine)
    if found is not mine:                  # another thread's came first
        _free_scratch(dev, made)
    return found


def _new_scratch(dev: CUDADevice, n: int, area: int = 0) -> tuple[int, int]:
    """(environment, buffer): one device block holding a reduction buffer of `n` bytes
    (a multiple of 8: _reduction_bytes) with a launch environment's 16 bytes after it,
    then `area` bytes more (ReductionScratch.section)."""
    buffer = dev.alloc(n + 16 + area, AllocKind.DEVICE)
    return buffer + n, buffer


def _point(dev: CUDADevice, env: int, buffer: int) -> None:
    """Write launch environment `env`: its counters 0, its buffer `buffer`."""
    _write(dev, env, struct.pack("<IIQ", 0, 0, buffer))


def _free_scratch(dev: CUDADevice, pairs: list[tuple[int, int]]) -> None:
    for _, block in pairs:
        dev.free(block)


def launch(dev: CUDADevice, binary: Any, name: str, args: Sequence[int], teams: int,
           threads: int, tripcount: int) -> tuple[int, int, str]:
    """Run kernel `name` of a loaded image to completion: host function pointers among
    the arguments translated through the indirect call table (clang 19 emits no lookup
    at indirect call sites; later clang calls __llvm_omp_indirect_call_lookup there, and
    under LLVM 19 such a call faults), LLVM 19's geometry, the launch environment as
    argument 0, device printf flushed. Returns how it ran, for LIBOMPTARGET_INFO."""
    program = dev.load(binary)
    functions = indirect_functions(dev, program)
    if functions:
        args = [functions.get(a, a) for a in args]
    env = kernel_environment(dev, program, name)
    blocks, block = _grid(dev, binary, env, name, teams, threads, tripcount)
    launch_env, token = launch_environment(dev, env, blocks)
    try:
        dev.plugin.launch_kernel(dev.id, binary, name, [launch_env, *args], blocks, block)
        flush_printf(dev, binary)
    finally:
        give_back(dev, token)
    return blocks, block, _MODE_NAMES.get(env.exec_mode, "Generic")
