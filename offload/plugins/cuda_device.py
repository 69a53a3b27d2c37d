"""A CUDA device (LLVM's CUDADeviceTy): its primary context, made current on every
driver entry, device memory and host allocations, copies (the compiled core's copier and
one-call launches), peer access, streams as queues and events, waited for by polling."""
from __future__ import annotations

from typing import Any

from ..errors import OffloadError
from . import _cuda_driver as C
from ._cuda_driver import ATTRIBUTES
from ._cuda_driver import ptr as _ptr
from .accel_specs import COPIER_STREAMS, CudaCopier, LaunchSpec
from .args import slotted
from .common import AllocKind, GenericDevice, GenericKernel
from .cuda_kernels import _NOT_READY, SHARED_DEFAULT, CUDAKernels, _ffi
from .waits import SPIN_SECONDS


class CUDADevice(CUDAKernels):
    plugin: Any                      # its CUDAPlugin (cuda.py)

    def _init_impl(self) -> None:
        drv = self.plugin.drv
        dev = _ffi.new("CUdevice *")
        drv.check(drv.lib.cuDeviceGet(dev, self.id), "cuDeviceGet")
        self.cu_device = dev[0]
        flags, active = _ffi.new("unsigned int *"), _ffi.new("int *")
        drv.check(drv.lib.cuDevicePrimaryCtxGetState(self.cu_device, flags, active),
                  "cuDevicePrimaryCtxGetState")
        if not active[0]:               # as LLVM: block (not spin) in waits
            drv.check(drv.lib.cuDevicePrimaryCtxSetFlags_v2(self.cu_device,
                                                            C.CU_CTX_SCHED_BLOCKING_SYNC),
                      "cuDevicePrimaryCtxSetFlags")
        ctx = _ffi.new("CUcontext *")
        drv.check(drv.lib.cuDevicePrimaryCtxRetain(ctx, self.cu_device),
                  "cuDevicePrimaryCtxRetain")
        self.context = ctx[0]
        self.sm = (self._attr("compute capability major"), self._attr("compute capability minor"))
        self.max_block = self._attr("max threads per block")
        self.max_grid = self._attr("max grid dim x")
        self.max_shared = self._attr("max shared memory per block optin")
        self._peers: dict[int, bool] = {}            # peer device id -> access enabled

    def activate(self) -> None:
        """Make this device's primary context current, unconditionally (LLVM's
        setContext): CuPy, PyTorch or numba may have changed it since our last call."""
        drv = self.plugin.drv
        drv.alive()
        drv.check(drv.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _attr(self, name: str) -> int:
        v = _ffi.new("int *")
        self.plugin.drv.check(self.plugin.drv.lib.cuDeviceGetAttribute(
            v, ATTRIBUTES[name], self.cu_device), f"cuDeviceGetAttribute({name})")
        return v[0]

    def _deinit_impl(self) -> None:
        drv = self.plugin.drv
        if drv.dead is not None:
            return                      # the context is gone: drop records only
        lib = drv.lib
        for step in (lambda: self.activate(), self.queues.destroy_all,
                     lambda: [lib.cuModuleUnload(m) for m in self._loaded.values()]):
            try:
                step()
            except Exception:           # noqa: BLE001 - release what we can
                pass
        lib.cuDevicePrimaryCtxRelease_v2(self.cu_device)

    # ---- memory -----------------------------------------------------------
    def _alloc_impl(self, size: int, kind: AllocKind) -> int:
        drv = self.plugin.drv
        self.activate()
        if kind is AllocKind.HOST:
            p = _ffi.new("void **")
            drv.check(drv.lib.cuMemAllocHost_v2(p, size), f"cuMemAllocHost({size})")
            return int(_ffi.cast("uintptr_t", p[0]))
        d = _ffi.new("CUdeviceptr *")
        if kind is AllocKind.SHARED:
            drv.check(drv.lib.cuMemAllocManaged(d, size, C.CU_MEM_ATTACH_GLOBAL),
                      f"cuMemAllocManaged({size})")
        else:
            drv.check(drv.lib.cuMemAlloc_v2(d, size), f"cuMemAlloc({size})")
        return int(d[0])

    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None:
        drv = self.plugin.drv
        self.activate()
        if kind is AllocKind.HOST:
            drv.check(drv.lib.cuMemFreeHost(_ptr(addr)), "cuMemFreeHost")
        else:
            drv.check(drv.lib.cuMemFree_v2(addr), "cuMemFree")

    def _before_reuse_impl(self) -> None:
        # cuMemFree would wait for the device: so does handing the block to a new owner
        # (our queues, polled, so Ctrl-C still works)
        for q in list(self.queues.made):
            self._sync_impl(q)

    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: int | None) -> None:
        self.activate()
        rc = self.plugin.drv.lib.cuMemcpyHtoDAsync_v2(tgt, _ptr(host), size, queue)
        if rc == C.CUDA_ERROR_INVALID_VALUE and pinned is None:
            self._through_staging(True, tgt, host, size, queue)
            return
        self.plugin.drv.check(rc, "cuMemcpyHtoDAsync")
        # a pageable source is staged by the driver before the call returns

    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: int | None) -> None:
        if pinned is None and queue is not None:
            self._sync_impl(queue)      # the driver would block (unpolled) until it drains
        self.activate()
        rc = self.plugin.drv.lib.cuMemcpyDtoHAsync_v2(_ptr(host), tgt, size, queue)
        if rc == C.CUDA_ERROR_INVALID_VALUE and pinned is None:
            self._through_staging(False, tgt, host, size, queue)
            return
        self.plugin.drv.check(rc, "cuMemcpyDtoHAsync")
        # to pageable memory the driver returns only once the copy is complete

    def _copy_now_impl(self, to_device: bool, tgt: int, host: int, size: int) -> bool:
        fast = self.plugin.fast
        if fast is None:
            return False
        self.plugin.drv.alive()
        q = self.queues.get()
        if to_device:
            rc = fast.copy_wait(fast.set_ctx, self.context, fast.h2d, tgt, host, size,
                                fast.query, q, SPIN_SECONDS)
        else:
            rc = fast.copy_wait(fast.set_ctx, self.context, fast.d2h, host, tgt, size,
                                fast.query, q, SPIN_SECONDS)
        self._finish_fast(rc, q, "cuMemcpyHtoDAsync" if to_device else "cuMemcpyDtoHAsync")
        return True

    def accel_copier(self) -> CudaCopier | None:
        """The one-piece pinned copy of _copy_now_impl, for offload/accel_c: the driver's
        entry points, the context, COPIER_STREAMS streams of our own (kept until the device
        goes), the plugin's poll_stream for copies that outlast the spin, the driver's
        error check."""
        fast = self.plugin.fast
        if fast is None:
            return None
        streams = tuple(self.queues.get() for _ in range(COPIER_STREAMS))
        drv = self.plugin.drv

        def addr(cdata: Any) -> int:
            return int(_ffi.cast("uintptr_t", cdata))
        return CudaCopier("cuda", addr(fast.set_ctx), addr(self.context), addr(fast.h2d),
                          addr(fast.d2h), addr(fast.query), SPIN_SECONDS,
                          tuple(addr(q) for q in streams), streams, self.plugin.poll_stream,
                          drv.check, drv, self.id, self.plugin.pin_split or 0,
                          addr(fast.launch), addr(fast.memset),
                          lambda: self.copier_bounce(COPIER_STREAMS))

    accel_launches = True

    def _accel_launch_impl(self, kernel: GenericKernel, teams: int | None,
                           threads: int | None, shared_mem: int) -> LaunchSpec | None:
        """The one-call path of _launch_impl, as offload/accel_c makes it."""
        if self.plugin.fast is None:
            return None
        try:
            grid, block = self._geometry(kernel, teams, threads, shared_mem)
        except (OffloadError, TypeError, ValueError):
            return None
        sizes = tuple(kernel.params)
        if not (0 <= shared_mem <= SHARED_DEFAULT and len(sizes) <= 32
                and slotted(sizes)):
            return None
        return LaunchSpec(int(_ffi.cast("uintptr_t", kernel.handle[0])), grid, block,
                          shared_mem, sizes, kernel.name,
                          f"cuLaunchKernel({kernel.name}, grid={grid}, block={block})")

    def _finish_fast(self, rc: int, q: Any, what: str) -> None:
        """After a helper call on our queue `q`: poll on when it outlasted the spin, give
        the queue back (not when interrupted), raise the driver's error as `what`'s."""
        drv = self.plugin.drv
        if rc == _NOT_READY:
            rc = self.plugin.poll_stream(q)
        self.queues.release(q)
        drv.check(rc, what)

    def _through_staging(self, to_device: bool, tgt: int, host: int, size: int,
                         queue: Any) -> None:
        """A pageable range that another library registered in part: the driver refuses
        one copy across both kinds, so go through our own pinned buffers."""
        if queue is not None:
            self._sync_impl(queue)
        self.staging.copy(to_device, tgt, host, size)

    def _enable_peer(self, other: CUDADevice) -> None:
        """Peer access from this context to `other`'s memory, once per pair (LLVM's
        dataExchangeImpl); without it cuMemcpyPeer goes through the host."""
        if other.id in self._peers:
            return
        lib = self.plugin.drv.lib
        can = _ffi.new("int *")
        enabled = False
        if lib.cuDeviceCanAccessPeer(can, self.cu_device, other.cu_device) == 0 and can[0]:
            self.activate()
            rc = lib.cuCtxEnablePeerAccess(other.context, 0)
            enabled = rc in (C.CUDA_SUCCESS, C.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
            if not enabled and rc != C.CUDA_ERROR_TOO_MANY_PEERS:
                self.plugin.drv.check(rc, "cuCtxEnablePeerAccess")
        self._peers[other.id] = enabled

    def _exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                       queue: Any) -> bool:
        if not isinstance(dst_device, CUDADevice):
            return False
        if dst_device is not self:
            self._enable_peer(dst_device)
            dst_device._enable_peer(self)
        self.activate()
        lib = self.plugin.drv.lib
        with self.queue(queue) as q:
            if dst_device is self:
                rc = lib.cuMemcpyDtoDAsync_v2(dst, src, size, q)
            else:
                rc = lib.cuMemcpyPeerAsync(dst, dst_device.context, src, self.context, size, q)
            self.plugin.drv.check(rc, "device-to-device copy")
        if queue is not None:
            self._sync_impl(queue)
        return True

    def _copy_2d_impl(self, to_device: bool, tgt: int, tgt_pitch: int, host: int,
                      host_pitch: int, width: int, height: int, queue: Any,
                      pinned: int | None = None) -> bool:
        """cuMemcpy2DAsync (unified addressing: `host` itself, pinned or not); False
        where the driver refuses the layout (a pitch over its limit, a range another
        library registered in part)."""
        c = _ffi.new("CUDA_MEMCPY2D *")
        c.WidthInBytes, c.Height = width, height
        if to_device:
            c.srcMemoryType, c.srcHost, c.srcPitch = C.CU_MEMORYTYPE_HOST, _ptr(host), host_pitch
            c.dstMemoryType, c.dstDevice, c.dstPitch = C.CU_MEMORYTYPE_DEVICE, tgt, tgt_pitch
        else:
            c.srcMemoryType, c.srcDevice, c.srcPitch = C.CU_MEMORYTYPE_DEVICE, tgt, tgt_pitch
            c.dstMemoryType, c.dstHost, c.dstPitch = C.CU_MEMORYTYPE_HOST, _ptr(host), host_pitch
        self.activate()
        rc = self.plugin.drv.lib.cuMemcpy2DAsync_v2(c, queue)
        if rc == C.CUDA_ERROR_INVALID_VALUE:
            return False
        self.plugin.drv.check(rc, f"cuMemcpy2DAsync({width} x {height})")
        return True

    def _fill_impl(self, tgt: int, value: int, size: int, queue: Any) -> bool:
        """A device-side fill (cuMemsetD8Async): no host round trip."""
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuMemsetD8Async(tgt, value, size, queue),
                              f"cuMemsetD8Async(0x{tgt:x}, {value}, {size})")
        return True

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        self.activate()
        p = _ffi.new("void **")
        self.plugin.drv.check(self.plugin.drv.lib.cuMemAllocHost_v2(p, size),
                              "cuMemAllocHost(staging)")
        return int(_ffi.cast("uintptr_t", p[0])), self._create_queue_impl()

    def _free_staging_impl(self, addr: int, queue: Any) -> None:
        if self.plugin.drv.dead is not None:
            return
        self.activate()
        self.plugin.drv.lib.cuMemFreeHost(_ptr(addr))
        self.plugin.drv.lib.cuStreamDestroy_v2(queue)

    # ---- queues -----------------------------------------------------------
    def _create_queue_impl(self) -> Any:
        self.activate()
        s = _ffi.new("CUstream *")
        self.plugin.drv.check(self.plugin.drv.lib.cuStreamCreate(s, C.CU_STREAM_NON_BLOCKING),
                              "cuStreamCreate")
        return s[0]

    def _destroy_queue_impl(self, queue: Any) -> None:
        self.plugin.drv.lib.cuStreamDestroy_v2(queue)

    def _sync_impl(self, queue: Any) -> None:
        """Wait for a stream by polling it (the plugin's poll_stream), so a pending Ctrl-C
        is delivered."""
        drv = self.plugin.drv
        drv.alive()
        if queue is None:
            self.activate()
            drv.check(drv.lib.cuCtxSynchronize(), "cuCtxSynchronize")
            return
        drv.check(self.plugin.poll_stream(queue), "cuStreamSynchronize")

    # ---- events: CUDA events, waited for by polling ---------------------------
    def _event_create_impl(self) -> Any:
        self.activate()
        ev = _ffi.new("CUevent *")
        self.plugin.drv.check(self.plugin.drv.lib.cuEventCreate(ev, C.CU_EVENT_DISABLE_TIMING),
                              "cuEventCreate")
        return ev[0]

    def _event_record_impl(self, event: Any, queue: Any) -> None:
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuEventRecord(event, queue), "cuEventRecord")

    def _event_query_impl(self, event: Any) -> bool:
        rc = self.plugin.drv.lib.cuEventQuery(event)
        if rc == C.CUDA_ERROR_NOT_READY:
            return False
        self.plugin.drv.check(rc, "cuEventQuery")
        return True

    def _event_sync_impl(self, event: Any) -> None:
        self.plugin.drv.check(self.plugin.poll_event(event), "cuEventQuery")

    def _queue_wait_event_impl(self, queue: Any, event: Any) -> None:
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuStreamWaitEvent(queue, event, 0),
                              "cuStreamWaitEvent")

    def _event_destroy_impl(self, event: Any) -> None:
        self.plugin.drv.lib.cuEventDestroy_v2(event)

    def _timing_event_impl(self) -> Any:
        self.activate()
        ev = _ffi.new("CUevent *")
        self.plugin.drv.check(self.plugin.drv.lib.cuEventCreate(ev, C.CU_EVENT_DEFAULT),
                              "cuEventCreate")
        return ev[0]

    def _event_elapsed_ns_impl(self, start: Any, end: Any) -> int:
        lib = self.plugin.drv.lib
        elapsed = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        ms = _ffi.new("float *")
        self.plugin.drv.check(elapsed(ms, start, end), "cuEventElapsedTime")
        return round(ms[0] * 1e6)

    def _query_impl(self, queue: Any) -> bool:
        rc = self.plugin.drv.lib.cuStreamQuery(queue)
        if rc == C.CUDA_ERROR_NOT_READY:
            return False
        self.plugin.drv.check(rc, "cuStreamQuery")
        return True

    def _is_accessible_impl(self, host: int, size: int) -> bool:
        if self._attr("pageable memory access"):
            return True
        return self.plugin._is_pinned_impl(host, size) is not None

    def _info_impl(self) -> dict:
        name = _ffi.new("char[256]")
        self.plugin.drv.check(self.plugin.drv.lib.cuDeviceGetName(name, 256, self.cu_device),
                              "cuDeviceGetName")
        mem = _ffi.new("size_t *")
        self.plugin.drv.lib.cuDeviceTotalMem_v2(mem, self.cu_device)
        info = {"name": _ffi.string(name).decode(), "kind": "gpu",
                "architecture": f"sm_{self.sm[0]}{self.sm[1]}",
                "memory": f"{mem[0] / 2**30:.1f} GiB"}
        for key in ("multiprocessors", "async engines", "unified addressing",
                    "pageable memory access", "host register supported"):
            info[key] = self._attr(key)
        return info
