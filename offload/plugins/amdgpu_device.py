"""An AMDGPU device over ROCr/HSA (LLVM's AMDGPUDeviceTy): coarse-grained device memory
and fine-grained host memory from the agent's pools, async copies and AQL dispatch on
in-order plugin queues (an operation depends only on the one before it, through
barrier-AND packets), events as signals of their own, timing events for the profile,
kernels with their kernarg layout from the NT_AMDGPU_METADATA note."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import locks
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..targets import kernel_metadata, metadata_param, target_features
from . import _hsa_runtime as H
from ._hsa_queues import _NO_SIGNAL, AQLQueue
from ._hsa_runtime import ffi, uint
from .args import pack_scalar, params_from_prototype
from .common import AllocKind, GenericDevice, GenericKernel
from .launch_geometry import checked_workgroups

_ffi = ffi
DYNAMIC_STACK = 16 << 10          # private segment for kernels with dynamic call stacks (LLVM)
WAIT_TICKS = 50_000_000           # one wait's timeout hint; waits loop, checking queue errors
HW_QUEUES = 4                     # hardware queues per device (LLVM: 4)
UNSUPPORTED_HIDDEN = {"hidden_hostcall_buffer": "hostcall", "hidden_printf_buffer": "printf",
                      "hidden_heap_v1": "a device heap", "hidden_multigrid_sync_arg":
                      "multigrid synchronisation"}

__all__ = ["AMDGPUDevice", "GPUAgent", "metadata_param"]


@dataclass
class GPUAgent:
    """A GPU agent found at start-up: its HSA handle, ISA name and device memory pool."""

    agent: Any
    isa: str
    pool: Any


@dataclass
class _Kernel:
    kernel_object: int
    kernarg_size: int
    group_size: int
    private_size: int
    max_workgroup: int
    args: list              # metadata .args entries (explicit and hidden)


class _Queue:
    """A plugin queue: in order. `last` is the completion signal of its latest operation
    (the next one depends on it); what to give back once the queue has drained."""

    def __init__(self, hw: Any) -> None:
        self.hw = hw
        self.last: Any = None
        self.signals: list[Any] = []
        self.kernargs: list[tuple[int, int]] = []


class _Event:
    """An AMDGPU event: a signal of its own (None until first recorded); a timing event
    is always a barrier-AND packet, whose completion ROCr timestamps."""

    def __init__(self, timed: bool = False) -> None:
        self.sig: Any = None
        self.timed = timed


class AMDGPUDevice(GenericDevice):
    plugin: Any                      # its AMDGPUPlugin (amdgpu.py)

    def _init_impl(self) -> None:
        info = self.plugin.gpus[self.id]
        self.agent, self.isa, self.device_pool = info.agent, info.isa, info.pool
        self.processor, self.features = target_features(self.isa)
        hsa = self.plugin.hsa
        self.max_workgroup = hsa.agent_u32(self.agent, H.HSA_AGENT_INFO_WORKGROUP_MAX_SIZE,
                                           1024)
        self.max_grid = hsa.agent_u32(self.agent, H.HSA_AGENT_INFO_GRID_MAX_SIZE, 2**32 - 1)
        self.error: str | None = None             # set by the queue error callback
        self.hw_queues: list[AQLQueue] = []
        self._profiled = 0                        # the timestamp frequency, once profiled
        for _ in range(HW_QUEUES):
            q = AQLQueue(hsa, self.agent, 1024, self.plugin.queue_error_callback)
            self.hw_queues.append(q)
            self.plugin.queue_owner[q.id] = self
        self._next_hw = 0
        self._dispatch_lock = locks.new_lock()
        # every GPU agent that may reach this device's memory (a peer over P2P)
        self.peers = [g.agent for g in self.plugin.gpus
                      if hsa.pool_access(g.agent, self.device_pool)
                      != H.HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED]

    def _unload_impl(self, program: Any) -> None:
        self.plugin.hsa.lib.hsa_executable_destroy(program[0])

    def _deinit_impl(self) -> None:
        lib = self.plugin.hsa.lib
        self.queues.destroy_all()
        for exe, _ in self._loaded.values():
            lib.hsa_executable_destroy(exe)
        for q in self.hw_queues:
            q.destroy()

    # ---- memory -----------------------------------------------------------
    def _alloc_impl(self, size: int, kind: AllocKind) -> int:
        hsa = self.plugin.hsa
        p = _ffi.new("void **")
        pool = self.device_pool if kind is AllocKind.DEVICE else self.plugin.host_pool
        hsa.check(hsa.lib.hsa_amd_memory_pool_allocate(pool, size, 0, p),
                  f"hsa_amd_memory_pool_allocate({size})")
        agents = self.peers if kind is AllocKind.DEVICE else self.plugin.gpu_agents
        try:
            hsa.allow_access(agents, uint(p[0]))     # ROCr maps it to its owner only
        except BaseException:
            hsa.lib.hsa_amd_memory_pool_free(p[0])
            raise
        return uint(p[0])

    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None:
        self.plugin.hsa.check(self.plugin.hsa.lib.hsa_amd_memory_pool_free(
            _ffi.cast("void *", addr)), "hsa_amd_memory_pool_free")

    def _copy(self, dst: int, dst_agent: Any, src: int, src_agent: Any, size: int,
              queue: _Queue | None) -> None:
        lib = self.plugin.hsa.lib
        self._enqueue_copy(
            queue, f"hsa_amd_memory_async_copy({size} bytes)",
            lambda n, deps, sig: lib.hsa_amd_memory_async_copy(
                _ffi.cast("void *", dst), dst_agent, _ffi.cast("void *", src), src_agent, size,
                n, deps, sig))

    def _enqueue_copy(self, queue: _Queue | None, what: str,
                      submit: Callable[[int, Any, Any], int]) -> None:
        """Start a copy on `queue` (after its last pending signal), with a completion
        signal of its own; without a queue, wait for it."""
        own = queue is None
        q: _Queue = self.get_queue() if queue is None else queue
        try:
            hsa, plugin = self.plugin.hsa, self.plugin
            sig = plugin.signals.get()
            dep = self._pending(q)
            deps = _ffi.new("hsa_signal_t[]", [dep]) if dep is not None else _ffi.NULL
            status = submit(1 if dep is not None else 0, deps, sig)
            if status != H.HSA_STATUS_SUCCESS:
                plugin.signals.put(sig)
                hsa.check(status, what)
            q.last = sig
            q.signals.append(sig)
            if own:
                self._sync_impl(q)
        finally:
            if own:
                self.release_queue(q)

    def _copy_2d_impl(self, to_device: bool, tgt: int, tgt_pitch: int, host: int,
                      host_pitch: int, width: int, height: int, queue: Any,
                      pinned: int | None = None) -> bool:
        """hsa_amd_memory_async_copy_rect (SDMA) between the GPU and locked host memory
        named by its agent address; False where ROCr's rules do not hold (unpinned,
        an element not 4-byte aligned, over 2**32 - 1 bytes or rows)."""
        if pinned is None or (tgt | tgt_pitch | pinned | host_pitch | width) % 4 \
                or max(width, height) >= 1 << 32:
            return False
        d = _ffi.new("hsa_pitched_ptr_t *", [_ffi.cast("void *", tgt), tgt_pitch, 0])
        h = _ffi.new("hsa_pitched_ptr_t *", [_ffi.cast("void *", pinned), host_pitch, 0])
        zero = _ffi.new("hsa_dim3_t *", [0, 0, 0])
        box = _ffi.new("hsa_dim3_t *", [width, height, 1])
        dst, src = (d, h) if to_device else (h, d)
        direction = H.hsaHostToDevice if to_device else H.hsaDeviceToHost
        lib = self.plugin.hsa.lib
        self._enqueue_copy(
            queue, f"hsa_amd_memory_async_copy_rect({width} x {height})",
            lambda n, deps, sig: lib.hsa_amd_memory_async_copy_rect(
                dst, zero, src, zero, box, self.agent, direction, n, deps, sig))
        return True

    def _pending(self, q: _Queue) -> Any:
        """The queue's last signal if it is still pending (what the next op waits for)."""
        if q.last is not None and self.plugin.hsa.lib.hsa_signal_load_scacquire(q.last) > 0:
            return q.last
        return None

    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: int | None) -> None:
        if pinned is None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "HSA copies need pinned host memory; unpinned data is staged")
        self._copy(tgt, self.agent, pinned, self._source_agent(host, pinned), size, queue)

    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: int | None) -> None:
        if pinned is None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "HSA copies need pinned host memory; unpinned data is staged")
        self._copy(pinned, self._source_agent(host, pinned), tgt, self.agent, size, queue)

    def _source_agent(self, host: int, pinned: int) -> Any:
        """Locked memory is named by the GPU's agent address; pool memory by the CPU's."""
        return self.agent if pinned != host else self.plugin.cpu_agent

    def _exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                       queue: Any) -> bool:
        if not isinstance(dst_device, AMDGPUDevice):
            return False
        # ROCr runs the copy on the source GPU, which must reach the destination memory
        if dst_device is not self and self.agent not in dst_device.peers:
            return False                             # no P2P: through the host
        self._copy(dst, dst_device.agent, src, self.agent, size, queue)
        return True

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        return self._alloc_impl(size, AllocKind.HOST), self._create_queue_impl()

    def _free_staging_impl(self, addr: int, queue: Any) -> None:
        self._free_impl(addr, 0, AllocKind.HOST)

    # ---- queues -----------------------------------------------------------
    def _create_queue_impl(self) -> _Queue:
        with self._dispatch_lock:
            hw = self.hw_queues[self._next_hw % len(self.hw_queues)]
            self._next_hw += 1
        return _Queue(hw)

    def _sync_impl(self, queue: _Queue | None) -> None:
        if queue is None:
            return
        plugin = self.plugin
        try:
            if queue.last is not None:
                plugin.wait(queue.last, self)
        finally:
            queue.last = None
            signals, queue.signals = queue.signals, []
            kernargs, queue.kernargs = queue.kernargs, []
            # a wait cut short (a device error, a Ctrl-C) leaves operations in flight: a
            # signal one still holds is never handed to the next (its late completion
            # would complete someone else's), nor, then, the kernel arguments
            load = plugin.hsa.lib.hsa_signal_load_scacquire
            held = False
            for sig in signals:
                if load(sig) > 0:
                    held = True
                else:
                    plugin.signals.put(sig)
            if not held:
                for addr, cls in kernargs:
                    plugin.kernargs.put(addr, cls)

    def _query_impl(self, queue: _Queue) -> bool:
        return self._pending(queue) is None

    # ---- events: a signal of their own, set by a barrier-AND after the queue's work --
    def _event_create_impl(self) -> Any:
        return _Event()

    def _event_record_impl(self, event: Any, queue: Any) -> None:
        lib = self.plugin.hsa.lib
        if event.sig is None:
            event.sig = self.plugin.signals.get()
        dep = self._pending(queue) if isinstance(queue, _Queue) else None
        if dep is None and not event.timed:
            lib.hsa_signal_store_screlease(event.sig, 0)          # nothing queued: complete
            return
        lib.hsa_signal_store_screlease(event.sig, 1)
        with self._dispatch_lock:
            queue.hw.barrier_and(_NO_SIGNAL if dep is None else dep, self._check_error,
                                 done=event.sig)

    def _event_query_impl(self, event: Any) -> bool:
        if event.sig is None:
            return True
        value = self.plugin.hsa.lib.hsa_signal_load_scacquire(event.sig)
        if value < 0:
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"an asynchronous HSA operation failed (signal {value})")
        return value == 0

    def _event_sync_impl(self, event: Any) -> None:
        if event.sig is not None:
            self.plugin.wait(event.sig, self)

    def _queue_wait_event_impl(self, queue: Any, event: Any) -> None:
        if event.sig is None or self._event_query_impl(event):
            return
        done = self.plugin.signals.get()
        queue.signals.append(done)
        dep = self._pending(queue)
        with self._dispatch_lock:
            queue.hw.barrier_and(event.sig, self._check_error,
                                 () if dep is None else (dep,), done=done)
        queue.last = done

    def _event_destroy_impl(self, event: Any) -> None:
        sig, event.sig = event.sig, None
        if sig is not None and self.plugin.hsa.lib.hsa_signal_load_scacquire(sig) == 0:
            self.plugin.signals.put(sig)        # a pending one is never reused: dropped

    def _timing_event_impl(self) -> Any:
        hsa = self.plugin.hsa
        if not self._profiled:                 # ROCr timestamps packets of these queues
            for hw in self.hw_queues:
                hsa.check(hsa.lib.hsa_amd_profiling_set_profiler_enabled(hw.q, 1),
                          "hsa_amd_profiling_set_profiler_enabled")
            freq = _ffi.new("uint64_t *")
            hsa.check(hsa.lib.hsa_system_get_info(H.HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, freq),
                      "hsa_system_get_info(TIMESTAMP_FREQUENCY)")
            self._profiled = freq[0]
        return _Event(timed=True)

    def _event_elapsed_ns_impl(self, start: Any, end: Any) -> int:
        hsa = self.plugin.hsa
        t = _ffi.new("hsa_amd_profiling_dispatch_time_t[2]")
        for i, ev in enumerate((start, end)):
            hsa.check(hsa.lib.hsa_amd_profiling_get_dispatch_time(self.agent, ev.sig, t + i),
                      "hsa_amd_profiling_get_dispatch_time")
        return (t[1].end - t[0].end) * 1_000_000_000 // self._profiled

    # ---- kernels ----------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        kernels = kernel_metadata(binary.data)
        return self.plugin.hsa.load_executable(self.agent, binary.data), kernels

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        exe, meta = program
        info = self.plugin.hsa.kernel_symbol(exe, self.agent, name)
        if info[H.HSA_EXECUTABLE_SYMBOL_INFO_TYPE] != H.HSA_SYMBOL_KIND_KERNEL:
            raise OffloadError(ErrorCode.INVALID_BINARY, f"symbol '{name}.kd' is not a kernel")
        md = meta.get(name)
        if md is None:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"kernel '{name}' has no entry in the code object's metadata")
        for a in md.get(".args", []):
            if a[".value_kind"] in UNSUPPORTED_HIDDEN:
                raise OffloadError(ErrorCode.UNSUPPORTED,
                                   f"kernel '{name}' needs {UNSUPPORTED_HIDDEN[a['.value_kind']]}"
                                   f" ({a['.value_kind']}), which offload does not provide; "
                                   f"build it without printf/hostcall (-mno-... or no printf)")
        size = max(info[H.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE],
                   md.get(".kernarg_segment_size", 0))
        for a in md.get(".args", []):
            if a[".offset"] + a[".size"] > max(size, 8):
                raise OffloadError(ErrorCode.INVALID_BINARY,
                                   f"kernel '{name}': argument at offset {a['.offset']} "
                                   f"({a['.size']} bytes) lies past its {size}-byte kernarg "
                                   f"segment")
        private = info[H.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE]
        if info[H.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK]:
            private = max(private, DYNAMIC_STACK)      # recursion, indirect calls, alloca
        max_wg = md.get(".max_flat_workgroup_size", 1024)
        k = _Kernel(info[H.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT], size,
                    info[H.HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE], private,
                    max_wg if isinstance(max_wg, int) and max_wg > 0 else 1024,
                    list(md.get(".args", [])))
        explicit = [a for a in k.args if not a[".value_kind"].startswith("hidden_")]
        decl = binary.prototypes.get(name)
        types = params_from_prototype(decl, name) if decl else None
        return GenericKernel(name, k, explicit,
                             decl or ", ".join(f"{a['.value_kind']}:{a['.size']}"
                                               for a in explicit),
                             types or [metadata_param(a) for a in explicit])

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any, shared_mem: int = 0) -> None:
        k: _Kernel = kernel.handle
        name = kernel.name
        groups, wg = checked_workgroups(name, teams, threads, 64,
                                        min(self.max_workgroup, k.max_workgroup),
                                        self.max_grid)
        kernarg = bytearray(max(k.kernarg_size, 8))
        for meta, value in zip(kernel.params, args, strict=True):
            _pack_arg(kernarg, meta, value, name)
        hidden = {"hidden_block_count_x": groups, "hidden_block_count_y": 1,
                  "hidden_block_count_z": 1, "hidden_group_size_x": wg,
                  "hidden_group_size_y": 1, "hidden_group_size_z": 1, "hidden_grid_dims": 1}
        for meta in k.args:
            if meta[".value_kind"] in hidden:
                _pack_arg(kernarg, meta, hidden[meta[".value_kind"]], name)
        own = queue is None
        q: _Queue = self.get_queue() if queue is None else queue
        try:
            self._dispatch(k, bytes(kernarg), groups, wg, q, shared_mem)
            if own:
                self._sync_impl(q)
        finally:
            if own:
                self.release_queue(q)

    def _dispatch(self, k: _Kernel, kernarg: bytes, groups: int, wg: int, q: _Queue,
                  shared_mem: int = 0) -> None:
        plugin = self.plugin
        self._check_error()
        addr, cls = plugin.kernargs.get(len(kernarg))
        q.kernargs.append((addr, cls))
        _ffi.memmove(_ffi.cast("void *", addr), kernarg, len(kernarg))
        done = plugin.signals.get()
        q.signals.append(done)
        dep = self._pending(q)           # a copy before the kernel: a barrier-AND on it
        hw = q.hw
        with self._dispatch_lock:
            if dep is not None:
                hw.barrier_and(dep, self._check_error)
            hw.dispatch(wg, groups * wg, k.private_size, k.group_size + shared_mem,
                        k.kernel_object, addr, done, self._check_error)
        q.last = done

    def _check_error(self) -> None:
        if self.error is not None:
            raise OffloadError(ErrorCode.BACKEND_FAILURE, self.error)

    def _is_accessible_impl(self, host: int, size: int) -> bool:
        return self.plugin._is_pinned_impl(host, size) is not None

    def _info_impl(self) -> dict:
        hsa = self.plugin.hsa
        name = _ffi.new("char[64]")
        hsa.check(hsa.lib.hsa_agent_get_info(self.agent, H.HSA_AMD_AGENT_INFO_PRODUCT_NAME,
                                             name), "hsa_agent_get_info(PRODUCT_NAME)")
        return {"name": _ffi.string(name).decode(), "kind": "gpu", "isa": self.isa,
                "processor": self.processor,
                "target features": ", ".join(f"{k}={v}" for k, v in sorted(self.features.items()))
                or "none",
                "compute units": hsa.agent_u32(self.agent,
                                               H.HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, 0),
                "max work-group size": self.max_workgroup}


def _pack_arg(buf: bytearray, meta: dict, value: Any, kernel: str) -> None:
    off, size = meta[".offset"], meta[".size"]
    buf[off:off + size] = pack_scalar(value, size,
                                      f"kernel '{kernel}', {meta['.value_kind']} argument")
