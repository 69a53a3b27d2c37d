"""AMDGPU plugin hooks over ROCr/HSA, following LLVM's AMDGPU plugin (plugins-nextgen
amdgpu/src/rtl.cpp): agents and ISAs; coarse-grained device memory, fine-grained host
memory and a kernarg arena, each made accessible to every GPU agent that can reach it;
one hsa_amd_memory_lock for all GPUs; async copies and AQL dispatch on in-order plugin
queues (an operation depends only on the one before it, through barrier-AND packets);
pooled signals; queue errors and failed copies become OffloadError; code objects checked
against the agent's target ID; kernarg layout from the NT_AMDGPU_METADATA note.
This module holds AMDGPUPlugin (discovery, waits and queue errors, images, pinning);
the device is in amdgpu_device.py. Bindings and the signal/kernarg pools are in
_hsa_runtime.py and _hsa_queues.py; semantics in common.py."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..targets import check_code_object, metadata_param
from . import _hsa_runtime as H
from ._hsa_queues import KernargArena, SignalPool
from ._hsa_runtime import HSA, uint
from ._hsa_runtime import ffi as _ffi
from .amdgpu_device import WAIT_TICKS, AMDGPUDevice, GPUAgent
from .common import GenericPlugin

__all__ = ["AMDGPUDevice", "AMDGPUPlugin", "GPUAgent", "metadata_param"]


class AMDGPUPlugin(GenericPlugin[AMDGPUDevice]):
    name = "amdgpu"
    priority = 20
    device_class = AMDGPUDevice
    asynchronous = True
    device_pool_bytes = 1 << 30     # reuse freed device memory (up to 1 GiB)
    staging_threshold = 1          # HSA copies only pinned memory: stage every unpinned piece
    staging_chunk = 8 << 20
    staging_lanes = 8

    hsa: HSA                       # set by _init_impl, before any device exists
    signals: SignalPool
    kernargs: KernargArena

    def __init__(self, config: Config):
        super().__init__(config)
        self.gpus: list[GPUAgent] = []
        self.gpu_agents: list[Any] = []
        self.queue_owner: dict[int, AMDGPUDevice] = {}
        self._locks: dict[int, int] = {}        # host base -> agent address, our locks
        self._initialized = False
        # ROCr calls this on a queue error (bad geometry, LDS, traps, device asserts)
        self.queue_error_callback = _ffi.callback(
            "void(hsa_status_t, hsa_queue_t *, void *)", self._on_queue_error)

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
        cpus = [a for a, k in agents if k == H.HSA_DEVICE_TYPE_CPU]
        if not cpus:
            raise OffloadError(ErrorCode.NOT_FOUND, "HSA reports no CPU agent")
        self.cpu_agent = cpus[0]
        pools = hsa.pools(self.cpu_agent)
        fine, kernarg = (H.HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                         H.HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
        self.host_pool = next((p for p, f in pools if f & fine and not f & kernarg),
                              next((p for p, f in pools if f & fine), None))
        self.kernarg_pool = next((p for p, f in pools if f & kernarg), self.host_pool)
        if self.host_pool is None:
            raise OffloadError(ErrorCode.NOT_FOUND, "no fine-grained host memory pool")
        for agent, kind in agents:
            if kind != H.HSA_DEVICE_TYPE_GPU or not hsa.agent_u32(
                    agent, H.HSA_AGENT_INFO_FEATURE, 0) & H.HSA_AGENT_FEATURE_KERNEL_DISPATCH:
                continue
            pool = next((p for p, f in hsa.pools(agent)
                         if f & H.HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED), None)
            if pool is not None:
                self.gpus.append(GPUAgent(agent, hsa.isa_name(agent), pool))
        self.gpu_agents = [g.agent for g in self.gpus]
        self.signals = SignalPool(hsa)
        self.kernargs = KernargArena(hsa, self.kernarg_pool, self.gpu_agents)
        if not self.gpus:
            self.reason = "HSA reports no GPU agent that dispatches kernels"
        return len(self.gpus)

    def _deinit_impl(self) -> None:
        if self._initialized:
            self.kernargs.destroy()
            self.signals.destroy()
            self.hsa.lib.hsa_shut_down()
            self._initialized = False

    # ---- waits and queue errors ---------------------------------------------
    def _on_queue_error(self, status: int, queue: Any, data: Any) -> None:
        dev = self.queue_owner.get(uint(queue))
        if dev is not None and dev.error is None:
            dev.error = (f"device {dev.id}: the queue stopped on an error: "
                         f"{self.hsa.text(status)} (bad launch geometry, too much group "
                         f"memory, a trap or a failed device assert); it is suspended")

    def wait(self, sig: Any, dev: AMDGPUDevice | None = None) -> None:
        """Wait until a completion signal reaches 0; a negative value (a failed copy) or
        a queue error raises. Each wait is bounded and the loop checks for errors."""
        lib = self.hsa.lib
        while True:
            value = lib.hsa_signal_wait_scacquire(sig, H.HSA_SIGNAL_CONDITION_LT, 1, WAIT_TICKS,
                                                  H.HSA_WAIT_STATE_BLOCKED)
            if value < 0:
                raise OffloadError(ErrorCode.BACKEND_FAILURE,
                                   f"an asynchronous HSA operation failed (its completion "
                                   f"signal went to {value})")
            if value == 0:
                return
            failed = dev.error if dev is not None else next(
                (d.error for d in self.initialized_devices() if d.error), None)
            if failed:
                raise OffloadError(ErrorCode.BACKEND_FAILURE, failed)

    # ---- images -------------------------------------------------------------
    def check_binary(self, binary: Binary, dev: AMDGPUDevice | None = None) -> None:
        """Raise INVALID_BINARY naming the mismatch unless `binary` fits dev's target ID."""
        check_code_object(binary, None if dev is None else (dev.id, dev.processor,
                                                            dev.features, dev.isa))

    # ---- pinning: one lock for every GPU agent, as LLVM's dataLockImpl --------------
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        found = self._pointer_info(host, size)
        if found is not None and found[3] == H.HSA_EXT_POINTER_TYPE_HSA:
            # memory HSA allocated (alloc_host, hipHostMalloc): never locked; grant access
            self.hsa.allow_access(self.gpu_agents, found[0])
            return found[2] + (host - found[0])
        if not first:
            known = self._locks.get(host)
            if known is not None:
                return known
            if found is not None:                   # locked by someone else (legacy thunk)
                return found[2] + (host - found[0])
            return host                             # SVM thunk: the host address serves
        out = _ffi.new("void **")
        self.hsa.check(self.hsa.lib.hsa_amd_memory_lock(_ffi.cast("void *", host), size,
                                                        _ffi.NULL, 0, out),
                       f"hsa_amd_memory_lock(0x{host:x}, {size})")
        self._locks[host] = uint(out[0])
        return uint(out[0])

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last and host in self._locks:
            self.hsa.check(self.hsa.lib.hsa_amd_memory_unlock(_ffi.cast("void *", host)),
                           f"hsa_amd_memory_unlock(0x{host:x})")
            del self._locks[host]

    def _is_pinned_impl(self, host: int, size: int) -> tuple[int, int, int] | None:
        """Locked or HSA-allocated memory: (host base, size, agent base address)."""
        found = self._pointer_info(host, size)
        return None if found is None else found[:3]

    def _pointer_info(self, host: int, size: int) -> tuple[int, int, int, int] | None:
        """Locked or HSA-allocated memory: (host base, size, agent base, pointer type).
        (ROCm >= 5.7's SVM path reports locked memory as UNKNOWN: then None.)"""
        info = _ffi.new("hsa_amd_pointer_info_t *")
        info.size = _ffi.sizeof("hsa_amd_pointer_info_t")
        self.hsa.check(self.hsa.lib.hsa_amd_pointer_info(_ffi.cast("void *", host), info,
                                                         _ffi.NULL, _ffi.NULL, _ffi.NULL),
                       "hsa_amd_pointer_info")
        if info.type not in (H.HSA_EXT_POINTER_TYPE_LOCKED, H.HSA_EXT_POINTER_TYPE_HSA):
            return None
        base = uint(info.hostBaseAddress)
        if not (base <= host and host + size <= base + info.sizeInBytes):
            return None
        return base, int(info.sizeInBytes), uint(info.agentBaseAddress), int(info.type)
