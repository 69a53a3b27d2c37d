"""AMDGPU plugin hooks over ROCr/HSA: agents and ISAs, memory pools (coarse-grained
device memory, fine-grained host memory, the kernarg pool), hsa_amd_memory_lock
pinning per agent, async copies with completion signals, code objects checked against
the agent's target ID, kernarg layout from the NT_AMDGPU_METADATA note, AQL dispatch.
Bindings are in _hsa_runtime.py; semantics (counts, splits, path choice) in common.py."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..targets import code_object_target, kernel_metadata, metadata_param, target_features
from ._hsa_runtime import (
    HSA,
    HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
    HSA_AMD_AGENT_INFO_PRODUCT_NAME,
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
    HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
    HSA_DEVICE_TYPE_CPU,
    HSA_DEVICE_TYPE_GPU,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
    HSA_EXT_POINTER_TYPE_HSA,
    HSA_EXT_POINTER_TYPE_LOCKED,
    HSA_FENCE_SCOPE_SYSTEM,
    HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
    HSA_PACKET_HEADER_BARRIER,
    HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
    HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
    HSA_PACKET_HEADER_TYPE,
    HSA_PACKET_TYPE_KERNEL_DISPATCH,
    HSA_PROFILE_FULL,
    HSA_QUEUE_TYPE_MULTI,
    HSA_SIGNAL_CONDITION_LT,
    HSA_STATUS_SUCCESS,
    HSA_WAIT_STATE_BLOCKED,
    ffi,
    uint,
)
from .args import pack_scalar, params_from_prototype
from .common import AllocKind, GenericDevice, GenericKernel, GenericPlugin

_ffi = ffi
_uint = uint


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
    args: list              # metadata .args entries (explicit and hidden)


class _Queue:
    """A plugin queue: completion signals still to wait for, and what to free then."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.to_free: list[int] = []


class AMDGPUDevice(GenericDevice):
    plugin: AMDGPUPlugin

    def _init_impl(self) -> None:
        info = self.plugin.gpus[self.id]
        self.agent = info.agent
        self.isa = info.isa
        self.device_pool = info.pool
        self.processor, self.features = target_features(self.isa)
        hsa = self.plugin.hsa
        q = _ffi.new("hsa_queue_t **")
        hsa.check(hsa.lib.hsa_queue_create(self.agent, 4096, HSA_QUEUE_TYPE_MULTI, _ffi.NULL,
                                           _ffi.NULL, 0xFFFFFFFF, 0xFFFFFFFF, q),
                  "hsa_queue_create")
        self.hsa_queue = q[0]
        self._dispatch_lock = threading.Lock()

    def _deinit_impl(self) -> None:
        lib = self.plugin.hsa.lib
        for exe, reader, _ in self._loaded.values():
            lib.hsa_executable_destroy(exe)
            lib.hsa_code_object_reader_destroy(reader)
        lib.hsa_queue_destroy(self.hsa_queue)

    # ---- memory -----------------------------------------------------------
    def _alloc_impl(self, size: int, kind: AllocKind) -> int:
        hsa = self.plugin.hsa
        p = _ffi.new("void **")
        pool = self.device_pool if kind is AllocKind.DEVICE else self.plugin.host_pool
        hsa.check(hsa.lib.hsa_amd_memory_pool_allocate(pool, size, 0, p),
                  f"hsa_amd_memory_pool_allocate({size})")
        if kind is not AllocKind.DEVICE:
            agents = _ffi.new("hsa_agent_t[]", [self.agent])
            status = hsa.lib.hsa_amd_agents_allow_access(1, agents, _ffi.NULL, p[0])
            if status != HSA_STATUS_SUCCESS:
                hsa.lib.hsa_amd_memory_pool_free(p[0])
                hsa.check(status, "hsa_amd_agents_allow_access")
        return _uint(p[0])

    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None:
        self.plugin.hsa.check(self.plugin.hsa.lib.hsa_amd_memory_pool_free(
            _ffi.cast("void *", addr)), "hsa_amd_memory_pool_free")

    def _copy(self, dst: int, dst_agent: Any, src: int, src_agent: Any, size: int,
              queue: _Queue | None) -> None:
        hsa = self.plugin.hsa
        sig = self.plugin.signal()
        # in queue order: the copy waits for what the queue still runs (a kernel)
        deps = list(queue.pending) if queue is not None else []
        dep_array = _ffi.new("hsa_signal_t[]", deps) if deps else _ffi.NULL
        status = hsa.lib.hsa_amd_memory_async_copy(
            _ffi.cast("void *", dst), dst_agent, _ffi.cast("void *", src), src_agent, size,
            len(deps), dep_array, sig)
        if status != HSA_STATUS_SUCCESS:
            hsa.lib.hsa_signal_destroy(sig)
            hsa.check(status, f"hsa_amd_memory_async_copy({size} bytes)")
        if queue is None:
            self.plugin.wait(sig)
        else:
            queue.pending.append(sig)

    def _submit_impl(self, tgt, host, size, queue, pinned) -> None:
        if pinned is None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "HSA copies need pinned host memory; unpinned data is staged")
        self._copy(tgt, self.agent, pinned, self._source_agent(host, pinned), size, queue)

    def _retrieve_impl(self, host, tgt, size, queue, pinned) -> None:
        if pinned is None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "HSA copies need pinned host memory; unpinned data is staged")
        self._copy(pinned, self._source_agent(host, pinned), tgt, self.agent, size, queue)

    def _source_agent(self, host: int, pinned: int) -> Any:
        """Locked memory is named by the GPU's agent address; pool memory by the CPU's."""
        return self.agent if pinned != host else self.plugin.cpu_agent

    def _exchange_impl(self, src, dst_device, dst, size, queue) -> bool:
        if not isinstance(dst_device, AMDGPUDevice):
            return False
        self._copy(dst, dst_device.agent, src, self.agent, size, queue)
        return True

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        return self._alloc_impl(size, AllocKind.HOST), _Queue()

    def _free_staging_impl(self, addr: int, queue: Any) -> None:
        self._free_impl(addr, 0, AllocKind.HOST)

    # ---- queues -----------------------------------------------------------
    def _create_queue_impl(self) -> _Queue:
        return _Queue()

    def _sync_impl(self, queue: _Queue | None) -> None:
        if queue is None:
            return
        while queue.pending:
            self.plugin.wait(queue.pending.pop(0))
        while queue.to_free:
            self._free_impl(queue.to_free.pop(), 0, AllocKind.HOST)

    def _query_impl(self, queue: _Queue) -> bool:
        lib = self.plugin.hsa.lib
        return all(lib.hsa_signal_load_scacquire(s) < 1 for s in queue.pending)

    # ---- kernels ----------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        hsa = self.plugin.hsa
        reader = _ffi.new("hsa_code_object_reader_t *")
        buf = _ffi.from_buffer(binary.data)
        hsa.check(hsa.lib.hsa_code_object_reader_create_from_memory(buf, len(binary.data),
                                                                    reader),
                  "hsa_code_object_reader_create_from_memory")
        exe = _ffi.new("hsa_executable_t *")
        try:
            hsa.check(hsa.lib.hsa_executable_create_alt(
                HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, _ffi.NULL, exe),
                "hsa_executable_create_alt")
            hsa.check(hsa.lib.hsa_executable_load_agent_code_object(
                exe[0], self.agent, reader[0], _ffi.NULL, _ffi.NULL),
                "hsa_executable_load_agent_code_object")
            hsa.check(hsa.lib.hsa_executable_freeze(exe[0], _ffi.NULL), "hsa_executable_freeze")
        except OffloadError:
            hsa.lib.hsa_code_object_reader_destroy(reader[0])
            raise
        kernels = kernel_metadata(binary.data)
        return exe[0], reader[0], kernels

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        exe, _, meta = program
        hsa = self.plugin.hsa
        sym = _ffi.new("hsa_executable_symbol_t *")
        agent = _ffi.new("hsa_agent_t *", self.agent)
        status = hsa.lib.hsa_executable_get_symbol_by_name(exe, f"{name}.kd".encode(), agent,
                                                          sym)
        if status != HSA_STATUS_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' ({name}.kd) not found: {hsa.text(status)}")
        values = {}
        for attr, ctype in ((HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, "uint64_t *"),
                            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, "uint32_t *"),
                            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, "uint32_t *"),
                            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                             "uint32_t *")):
            v = _ffi.new(ctype)
            hsa.check(hsa.lib.hsa_executable_symbol_get_info(sym[0], attr, v),
                      f"hsa_executable_symbol_get_info({attr})")
            values[attr] = v[0]
        md = meta.get(name)
        if md is None:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"kernel '{name}' has no entry in the code object's metadata")
        size = max(values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE],
                   md.get(".kernarg_segment_size", 0))
        for a in md.get(".args", []):
            if a[".offset"] + a[".size"] > max(size, 8):
                raise OffloadError(ErrorCode.INVALID_BINARY,
                                   f"kernel '{name}': argument at offset {a['.offset']} "
                                   f"({a['.size']} bytes) lies past its {size}-byte kernarg "
                                   f"segment")
        k = _Kernel(values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT], size,
                    values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE],
                    values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE],
                    list(md.get(".args", [])))
        explicit = [a for a in k.args if not a[".value_kind"].startswith("hidden_")]
        decl = binary.prototypes.get(name)
        types = params_from_prototype(decl, name) if decl else None
        return GenericKernel(name, k, explicit,
                             decl or ", ".join(f"{a['.value_kind']}:{a['.size']}"
                                               for a in explicit),
                             types or [metadata_param(a) for a in explicit])

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any) -> None:
        k: _Kernel = kernel.handle
        name = kernel.name
        explicit = kernel.params
        wg = int(threads or 64)
        groups = int(teams or 1)
        kernarg = bytearray(max(k.kernarg_size, 8))
        for meta, value in zip(explicit, args, strict=False):
            _pack_arg(kernarg, meta, value, name)
        hidden = {"hidden_block_count_x": groups, "hidden_block_count_y": 1,
                  "hidden_block_count_z": 1, "hidden_group_size_x": wg,
                  "hidden_group_size_y": 1, "hidden_group_size_z": 1, "hidden_grid_dims": 1}
        for meta in k.args:
            if meta[".value_kind"] in hidden:
                _pack_arg(kernarg, meta, hidden[meta[".value_kind"]], name)
        self._dispatch(k, bytes(kernarg), groups, wg, queue)

    def _dispatch(self, k: _Kernel, kernarg: bytes, groups: int, wg: int,
                  queue: _Queue | None) -> None:
        plugin, hsa = self.plugin, self.plugin.hsa
        if queue is not None:          # copies enqueued before the kernel must land first
            self._sync_impl(queue)
        buf = _ffi.new("void **")
        hsa.check(hsa.lib.hsa_amd_memory_pool_allocate(plugin.kernarg_pool, len(kernarg), 0,
                                                       buf), "kernarg allocation")
        _ffi.memmove(buf[0], kernarg, len(kernarg))
        done = plugin.signal()
        q = self.hsa_queue
        with self._dispatch_lock:
            index = hsa.lib.hsa_queue_add_write_index_relaxed(q, 1)
            while index - hsa.lib.hsa_queue_load_read_index_scacquire(q) >= q.size:
                pass                                              # ring full: wait
            pkt = _ffi.cast("hsa_kernel_dispatch_packet_t *", q.base_address) + index % q.size
            pkt.workgroup_size_x, pkt.workgroup_size_y, pkt.workgroup_size_z = wg, 1, 1
            pkt.grid_size_x, pkt.grid_size_y, pkt.grid_size_z = groups * wg, 1, 1
            pkt.private_segment_size = k.private_size
            pkt.group_segment_size = k.group_size
            pkt.kernel_object = k.kernel_object
            pkt.kernarg_address = buf[0]
            pkt.completion_signal = done
            header = ((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
                      | (1 << HSA_PACKET_HEADER_BARRIER)
                      | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
                      | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE))
            setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS
            # publish: header and setup in one aligned 32-bit store, after the body
            _ffi.cast("uint32_t *", pkt)[0] = header | (setup << 16)
            hsa.lib.hsa_signal_store_screlease(q.doorbell_signal, index)
        if queue is None:
            plugin.wait(done)
            hsa.lib.hsa_amd_memory_pool_free(buf[0])
        else:
            queue.pending.append(done)
            queue.to_free.append(_uint(buf[0]))

    def _is_accessible_impl(self, host: int, size: int) -> bool:
        return self.plugin._is_pinned_impl(host, size) is not None

    def _info_impl(self) -> dict:
        hsa = self.plugin.hsa
        name = _ffi.new("char[64]")
        hsa.check(hsa.lib.hsa_agent_get_info(self.agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME, name),
                  "hsa_agent_get_info(PRODUCT_NAME)")
        cus = _ffi.new("uint32_t *")
        hsa.lib.hsa_agent_get_info(self.agent, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, cus)
        return {"name": _ffi.string(name).decode(), "kind": "gpu", "isa": self.isa,
                "processor": self.processor,
                "target features": ", ".join(f"{k}={v}" for k, v in sorted(self.features.items()))
                or "none", "compute units": cus[0]}


def _pack_arg(buf: bytearray, meta: dict, value: Any, kernel: str) -> None:
    off, size = meta[".offset"], meta[".size"]
    buf[off:off + size] = pack_scalar(value, size,
                                      f"kernel '{kernel}', {meta['.value_kind']} argument")


class AMDGPUPlugin(GenericPlugin[AMDGPUDevice]):
    name = "amdgpu"
    priority = 20
    device_class = AMDGPUDevice
    asynchronous = True
    device_pool_bytes = 1 << 30     # reuse freed device memory (up to 1 GiB)
    staging_threshold = 1          # HSA copies only pinned memory: stage every unpinned piece
    staging_chunk = 8 << 20
    staging_lanes = 8

    hsa: HSA               # set by _init_impl, before any device exists

    def __init__(self, config: Config):
        super().__init__(config)
        self.gpus: list[GPUAgent] = []
        self._initialized = False

    # ---- discovery ----------------------------------------------------------
    def _init_impl(self) -> int:
        try:
            self.hsa = HSA(self.config.hsa_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.hsa_library} not loadable ({exc})") from None
        hsa = self.hsa
        hsa.check(hsa.lib.hsa_init(), "hsa_init")
        self._initialized = True
        agents = hsa.agents()
        cpus = [a for a, k in agents if k == HSA_DEVICE_TYPE_CPU]
        if not cpus:
            raise OffloadError(ErrorCode.NOT_FOUND, "HSA reports no CPU agent")
        self.cpu_agent = cpus[0]
        pools = hsa.pools(self.cpu_agent)
        fine, kernarg = (HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                         HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
        self.host_pool = next((p for p, f in pools if f & fine and not f & kernarg),
                              next((p for p, f in pools
                                    if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED), None))
        self.kernarg_pool = next((p for p, f in pools
                                  if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT),
                                 self.host_pool)
        if self.host_pool is None:
            raise OffloadError(ErrorCode.NOT_FOUND, "no fine-grained host memory pool")
        for agent, kind in agents:
            if kind != HSA_DEVICE_TYPE_GPU:
                continue
            pool = next((p for p, f in hsa.pools(agent)
                         if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED), None)
            if pool is not None:
                self.gpus.append(GPUAgent(agent, hsa.isa_name(agent), pool))
        if not self.gpus:
            self.reason = "HSA reports no GPU agent"
        return len(self.gpus)

    def _deinit_impl(self) -> None:
        if self._initialized:
            self.hsa.lib.hsa_shut_down()
            self._initialized = False

    # ---- signals ------------------------------------------------------------
    def signal(self) -> Any:
        s = _ffi.new("hsa_signal_t *")
        self.hsa.check(self.hsa.lib.hsa_signal_create(1, 0, _ffi.NULL, s), "hsa_signal_create")
        return s[0]

    def wait(self, sig: Any) -> None:
        """Wait for a completion signal (decremented to 0) and destroy it."""
        self.hsa.lib.hsa_signal_wait_scacquire(sig, HSA_SIGNAL_CONDITION_LT, 1,
                                               0xFFFFFFFFFFFFFFFF, HSA_WAIT_STATE_BLOCKED)
        self.hsa.lib.hsa_signal_destroy(sig)

    # ---- images -------------------------------------------------------------
    def check_binary(self, binary: Binary, dev: AMDGPUDevice | None = None) -> None:
        """Raise INVALID_BINARY naming the mismatch unless `binary` fits dev's target ID."""
        if binary.format != "elf" or binary.header.machine != "EM_AMDGPU":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"image is {binary.describe()}, not an AMDGPU code object")
        e = binary.header
        if e.type != "ET_DYN":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"AMDGPU code object must be ET_DYN (a linked shared object), "
                               f"not {e.type}")
        proc, feats = code_object_target(e.flags)
        if dev is None:
            return
        if proc != dev.processor:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"code object is for {proc}, device {dev.id} is "
                               f"{dev.processor} ({dev.isa})")
        for feat, setting in feats.items():
            want = dev.features.get(feat)
            if setting in ("on", "off") and want is not None and want != setting:
                raise OffloadError(ErrorCode.INVALID_BINARY,
                                   f"code object has {feat} {setting}, device {dev.id} runs "
                                   f"with {feat} {want} ({dev.isa})")

    # ---- pinning hooks: one hsa_amd_memory_lock per agent that uses an entry -----
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        dev = self.device(device)
        agents = _ffi.new("hsa_agent_t[]", [dev.agent])
        out = _ffi.new("void **")
        self.hsa.check(self.hsa.lib.hsa_amd_memory_lock(_ffi.cast("void *", host), size,
                                                        agents, 1, out),
                       f"hsa_amd_memory_lock(0x{host:x}, {size})")
        return _uint(out[0])

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        self.hsa.check(self.hsa.lib.hsa_amd_memory_unlock(_ffi.cast("void *", host)),
                       f"hsa_amd_memory_unlock(0x{host:x})")

    def _is_pinned_impl(self, host: int, size: int) -> tuple[int, int, int] | None:
        """Locked or HSA-allocated memory: (host base, size, agent base address)."""
        info = _ffi.new("hsa_amd_pointer_info_t *")
        info.size = _ffi.sizeof("hsa_amd_pointer_info_t")
        self.hsa.check(self.hsa.lib.hsa_amd_pointer_info(_ffi.cast("void *", host), info,
                                                         _ffi.NULL, _ffi.NULL, _ffi.NULL),
                       "hsa_amd_pointer_info")
        if info.type not in (HSA_EXT_POINTER_TYPE_LOCKED, HSA_EXT_POINTER_TYPE_HSA):
            return None
        base = _uint(info.hostBaseAddress)
        if not (base <= host and host + size <= base + info.sizeInBytes):
            return None
        return base, int(info.sizeInBytes), _uint(info.agentBaseAddress)
