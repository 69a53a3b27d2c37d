"""CUDA plugin hooks, following LLVM's CUDA plugin (plugins-nextgen/cuda/src/rtl.cpp):
primary contexts made current on every driver entry (other libraries change the current
context behind us), blocking-sync scheduling and waits that poll so Ctrl-C reaches them,
streams as queues, cuMemHostRegister pinning (chunked, writable when it can be), peer
access for device-to-device copies, a context that died with a kernel fault failing every
later call at once. Bindings are in _cuda_driver.py, NVRTC in nvrtc.py; semantics
(counts, splits, path choice) stay in common.py."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..config import Config
from ..dlpack import register_stream_waiter, unregister_stream_waiter
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..targets import cubin_sm
from . import _cuda_driver as C
from . import _cuda_openmp
from ._cuda_driver import ATTRIBUTES, Driver, ffi
from ._cuda_driver import ptr as _ptr
from ._cuda_fast import Fast, fast_calls
from ._cuda_memory import register, registration, unregister
from .args import ArgSlots, pack_scalar, params_from_prototype, slotted
from .common import AllocKind, GenericDevice, GenericKernel, GenericPlugin
from .launch_geometry import checked_blocks
from .waits import SPIN_SECONDS, poll

_ffi = ffi
_INIT_PID: list[int] = []           # the process that initialised CUDA (fork detection)
REGISTER_CHUNK = 64 << 30           # cuMemHostRegister at most this much at once (r580+)
SHARED_DEFAULT = 48 << 10           # dynamic shared memory allowed without opting in


_REQUIRES_USM = 0x8                # requires unified_shared_memory (OMP_REQ_*)
_NOT_READY = C.CUDA_ERROR_NOT_READY


def _poll(query: Any, handle: Any) -> int:
    """poll() (the common wait policy) of a CUDA stream or event query."""
    return poll(query, handle, _NOT_READY)


class CUDADevice(GenericDevice):
    plugin: CUDAPlugin

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

    def accel_copier(self) -> tuple | None:
        """The one-piece pinned copy of _copy_now_impl, for offload/accel_c: the driver's
        entry points, the context, two streams of our own (kept until the device goes),
        _poll for copies that outlast the spin, the driver's error check."""
        fast = self.plugin.fast
        if fast is None:
            return None
        streams = (self.queues.get(), self.queues.get())
        drv = self.plugin.drv

        def addr(cdata: Any) -> int:
            return int(_ffi.cast("uintptr_t", cdata))

        def poll(stream: Any) -> int:
            return _poll(drv.lib.cuStreamQuery, stream)
        return ("cuda", addr(fast.set_ctx), addr(self.context), addr(fast.h2d), addr(fast.d2h),
                addr(fast.query), SPIN_SECONDS, tuple(addr(q) for q in streams), streams,
                poll, drv.check, drv, self.id, self.plugin.pin_split or 0, addr(fast.launch))

    accel_launches = True

    def accel_launch(self, kernel: GenericKernel, teams: int | None, threads: int | None,
                     shared_mem: int) -> tuple | None:
        """The launch of `kernel` with this geometry as offload/accel_c makes it (the
        one-call path of _launch_impl), or None where that path does not apply or the
        geometry is refused (_launch_impl then explains). Kept per kernel and geometry."""
        key = (teams, threads, shared_mem)
        spec = kernel.fast_launch.get(key)
        if spec is not None or self.plugin.fast is None:
            return spec
        try:
            grid, block = self._geometry(kernel, teams, threads, shared_mem)
        except (OffloadError, TypeError, ValueError):
            return None
        sizes = tuple(kernel.params)
        if not (0 <= shared_mem <= SHARED_DEFAULT and len(sizes) <= 32
                and slotted(sizes)):
            return None
        spec = (int(_ffi.cast("uintptr_t", kernel.handle[0])), grid, block, shared_mem, sizes,
                kernel.name,
                f"cuLaunchKernel({kernel.name}, grid={grid}, block={block})")
        if len(kernel.fast_launch) < 64:
            kernel.fast_launch[key] = spec
        return spec

    def _finish_fast(self, rc: int, q: Any, what: str) -> None:
        """After a helper call on our queue `q`: poll on when it outlasted the spin, give
        the queue back (not when interrupted), raise the driver's error as `what`'s."""
        drv = self.plugin.drv
        if rc == _NOT_READY:
            rc = _poll(drv.lib.cuStreamQuery, q)
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
        """Wait for a stream by polling it (`_poll`), so a pending Ctrl-C is delivered."""
        drv = self.plugin.drv
        drv.alive()
        if queue is None:
            self.activate()
            drv.check(drv.lib.cuCtxSynchronize(), "cuCtxSynchronize")
            return
        drv.check(_poll(drv.lib.cuStreamQuery, queue), "cuStreamSynchronize")

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
        self.plugin.drv.check(_poll(self.plugin.drv.lib.cuEventQuery, event), "cuEventQuery")

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

    # ---- kernels ----------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        self.activate()
        mod = _ffi.new("CUmodule *")
        data = binary.data + (b"\0" if binary.format == "ptx" else b"")
        log = _ffi.new("char[]", 8192)
        opts = _ffi.new("int[]", [C.CU_JIT_ERROR_LOG_BUFFER, C.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES])
        vals = _ffi.new("void *[]", [log, _ffi.cast("void *", 8192)])
        rc = self.plugin.drv.lib.cuModuleLoadDataEx(mod, _ffi.from_buffer(data), 2, opts, vals)
        if rc != C.CUDA_SUCCESS:
            jit = _ffi.string(log).decode(errors="replace").strip()
            try:
                self.plugin.drv.check(rc, f"cuModuleLoadData({binary.describe()})")
            except OffloadError as exc:
                if jit:
                    raise OffloadError(exc.code, f"{exc.message}\nJIT log:\n{jit}") from None
                raise
        return mod[0]

    def _unload_impl(self, program: Any) -> None:
        self.activate()
        self.plugin.drv.lib.cuModuleUnload(program)

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        drv = self.plugin.drv
        self.activate()
        f = _ffi.new("CUfunction *")
        rc = drv.lib.cuModuleGetFunction(f, program, name.encode())
        if rc != C.CUDA_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND, f"kernel '{name}' not found: {drv.text(rc)}")
        decl = binary.prototypes.get(name)
        types = params_from_prototype(decl, name) if decl else None
        sizes: list[int] = []
        if drv.has_param_info:
            off, size = _ffi.new("size_t *"), _ffi.new("size_t *")
            while True:
                rc = drv.lib.cuFuncGetParamInfo(f[0], len(sizes), off, size)
                if rc == C.CUDA_ERROR_INVALID_VALUE:   # past the last parameter
                    break
                drv.check(rc, f"cuFuncGetParamInfo({name})")
                sizes.append(size[0])
        elif types is not None:         # before CUDA 12.4: sizes from the prototype
            sizes = [8 if p.pointer else p.size for p in types]
        else:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"kernel '{name}': this driver cannot report kernel parameters "
                               f"(cuFuncGetParamInfo is CUDA 12.4+) and the image carries no "
                               f"prototype; build it with compile_cuda or pass prototypes=")
        limit = _ffi.new("int *")
        drv.check(drv.lib.cuFuncGetAttribute(limit, C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                             f[0]), "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)")
        return GenericKernel(name, (f[0], limit[0]), sizes, decl or f"parameter sizes {sizes}",
                             types)

    def _geometry(self, kernel: GenericKernel, teams: int | None, threads: int | None,
                  shared_mem: int) -> tuple[int, int]:
        return checked_blocks(kernel.name, teams, threads, 128,
                              min(kernel.handle[1], self.max_block), self.max_grid,
                              shared_mem, self.max_shared)

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any, shared_mem: int = 0) -> None:
        name = kernel.name
        fn = kernel.handle[0]
        grid, block = self._geometry(kernel, teams, threads, shared_mem)
        state = kernel.launch_state
        if state is None:
            state = kernel.launch_state = ArgSlots(kernel.params, _ffi)
        held = state.fill(args)
        if held is not None:                    # integers and addresses: reused memory
            params = held[1]
        else:
            params = _ffi.new("void *[]", max(1, len(args)))
            keep = []
            for i, (a, sz) in enumerate(zip(args, kernel.params, strict=False)):
                c = _ffi.new("char[]", pack_scalar(a, sz, f"argument {i} of kernel '{name}'"))
                keep.append(c)
                params[i] = c
        drv = self.plugin.drv
        fast = self.plugin.fast
        if queue is None and fast is not None and shared_mem <= SHARED_DEFAULT:
            drv.alive()                                  # launch and wait, in one call
            q = self.queues.get()
            drv.last_kernel = name
            rc = fast.launch_wait(fast.set_ctx, self.context, fast.launch, fn, grid, block,
                                  shared_mem, q, params, fast.query, SPIN_SECONDS)
            if held is not None:
                state.free.append(held)
            self._finish_fast(rc, q, f"cuLaunchKernel({name}, grid={grid}, block={block})")
            return
        self.activate()
        if shared_mem > SHARED_DEFAULT:                  # opt in above 48 KiB, as LLVM
            drv.check(drv.lib.cuFuncSetAttribute(
                fn, C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        with self.queue(queue) as q:                     # no queue: launch and wait
            drv.last_kernel = name
            rc = drv.lib.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared_mem, q, params,
                                        _ffi.NULL)
            if held is not None:                # the driver copied the values
                state.free.append(held)
            drv.check(rc, f"cuLaunchKernel({name}, grid={grid}, block={block})")

    # ---- clang OpenMP nvptx images (LLVM 19's conventions: _cuda_openmp.py) -----------
    def _omp_load_impl(self, image: bytes, indirect: Sequence[tuple[int, str]]) -> Any:
        binary = Binary.from_bytes(image, None)
        _cuda_openmp.prepare(self, self.load(binary), tuple(indirect))
        return binary

    def _omp_global_impl(self, program: Any, name: str) -> int | None:
        found = _cuda_openmp.global_address(self, self.load(program), name)
        return None if found is None else found[0]

    def _omp_launch_impl(self, program: Any, name: str, args: Sequence[int], teams: int,
                         threads: int, tripcount: int) -> tuple[int, int, str]:
        return _cuda_openmp.launch(self, program, name, args, teams, threads, tripcount)

    def _omp_requires_impl(self, flags: int) -> None:
        if flags & _REQUIRES_USM and not self._attr("pageable memory access"):
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"the program requires unified_shared_memory, but CUDA device "
                               f"{self.id} cannot access pageable host memory (no HMM on "
                               f"this system)")

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


class CUDAPlugin(GenericPlugin[CUDADevice]):
    name = "cuda"
    priority = 10
    omp_image_kind = "nvptx"
    device_class = CUDADevice
    asynchronous = True
    device_pool_bytes = 1 << 30     # reuse freed device memory (up to 1 GiB)
    # unpinned pieces of 4 MiB and up are staged, 4 MiB at a time, by up to 16 workers with
    # two buffers each (chosen with bench/staging.py on an H200: see bench/RESULTS.md)
    staging_threshold = 4 << 20
    staging_chunk = 4 << 20
    staging_lanes = 32
    # registrations are made in chunks of this size on an absolute grid (one registration
    # of 512 GiB or more fails on r580+ drivers), and no copy may span two of them
    pin_split = REGISTER_CHUNK

    drv: Driver            # set by _init_impl, before any device exists
    #: synchronous copies and launches in one call (None: no C compiler for the helper)
    fast: Fast | None = None

    def __init__(self, config: Config):
        super().__init__(config)
        self._read_only: set[int] = set()            # hosts registered READ_ONLY

    def _init_impl(self) -> int:
        try:
            self.drv = Driver(self.config.cuda_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.cuda_library} not loadable ({exc})") from None
        rc = self.drv.lib.cuInit(0)
        if rc == C.CUDA_ERROR_NO_DEVICE:
            raise OffloadError(ErrorCode.NOT_FOUND, f"cuInit: {self.drv.text(rc)}")
        if rc == C.CUDA_ERROR_NOT_INITIALIZED and _INIT_PID and _INIT_PID[0] != os.getpid():
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"CUDA was initialised before fork() (in process {_INIT_PID[0]})"
                               f" and cannot be used in this child: start workers with "
                               f"multiprocessing's 'spawn' or 'forkserver' method")
        self.drv.check(rc, "cuInit")
        if not _INIT_PID:
            _INIT_PID.append(os.getpid())
        register_stream_waiter(self.wait_foreign_stream)
        n = _ffi.new("int *")
        self.drv.check(self.drv.lib.cuDeviceGetCount(n), "cuDeviceGetCount")
        if n[0] == 0:
            self.reason = "the driver reports no CUDA device"
        elif self.config.cuda_fast:
            self.fast = fast_calls(_ffi, self.drv.lib)
        return n[0]

    def check_binary(self, binary: Binary, dev: CUDADevice | None = None) -> None:
        """Raise INVALID_BINARY unless `binary` is a cubin for dev's SM, or PTX."""
        if binary.format == "ptx":
            return
        e = binary.header
        if e.machine != "EM_CUDA":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"image is {e.describe()}, not a CUDA cubin (EM_CUDA)")
        sm = cubin_sm(e.flags, e.abiversion)
        if dev is not None and not (sm // 10 == dev.sm[0] and sm % 10 <= dev.sm[1]):
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"cubin is for sm_{sm} (ELF ABI version {e.abiversion}), device "
                               f"{dev.id} is sm_{dev.sm[0]}{dev.sm[1]}")

    def architecture(self, d: int = 0) -> str | None:
        """'sm_XY' of device d, or None when this plugin has no such device."""
        if d >= self.number_of_devices():
            return None
        sm = self.device(d).sm
        return f"sm_{sm[0]}{sm[1]}"

    def _host_alloc_address(self, d: int, addr: int) -> int:
        return self._device_pointer(d, addr)

    def _device_pointer(self, d: int, host: int) -> int:
        self.device(d).activate()
        out = _ffi.new("CUdeviceptr *")
        self.drv.check(self.drv.lib.cuMemHostGetDevicePointer_v2(out, _ptr(host), 0),
                       "cuMemHostGetDevicePointer")
        return int(out[0])

    # ---- pinning hooks ----------------------------------------------------
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        if first:
            self.device(device).activate()
            if register(self.drv, host, size, read_only, self.pin_split):
                self._read_only.add(host)
        try:
            return self._device_pointer(device, host)
        except BaseException:            # registered, but unusable: take it back
            if first:
                self._read_only.discard(host)
                unregister(self.drv, host, size, self.pin_split)
            raise

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last:
            self.device(device).activate()
            self._read_only.discard(host)
            unregister(self.drv, host, size, self.pin_split)

    def pin_is_read_only(self, host: int) -> bool:
        return host in self._read_only

    def _deinit_impl(self) -> None:
        unregister_stream_waiter(self.wait_foreign_stream)

    def wait_foreign_stream(self, stream: int) -> None:
        """Wait for the work queued so far on a foreign CUDA stream (a raw CUstream; 1 and
        2 name the legacy and per-thread default streams of the current context): an
        event recorded on it, polled so Ctrl-C is delivered. No device-wide synchronize."""
        if not self.initialized_devices():
            return          # a plugin with no device in use has no stream of ours to order
        drv = self.drv
        drv.alive()
        handle = ffi.cast("CUstream", 0 if stream == 1 else stream)
        if drv.lib.cuStreamQuery(handle) == C.CUDA_SUCCESS:
            return                              # idle: nothing queued to wait for
        if stream not in (1, 2):                # the stream's own context, not ours
            ctx = ffi.new("CUcontext *")
            drv.check(drv.lib.cuStreamGetCtx(handle, ctx), f"cuStreamGetCtx(0x{stream:x})")
            drv.check(drv.lib.cuCtxSetCurrent(ctx[0]), "cuCtxSetCurrent")
        ev = ffi.new("CUevent *")
        drv.check(drv.lib.cuEventCreate(ev, C.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            drv.check(drv.lib.cuEventRecord(ev[0], handle), f"cuEventRecord(0x{stream:x})")
            drv.check(_poll(drv.lib.cuEventQuery, ev[0]), "cuEventQuery")
        finally:
            drv.lib.cuEventDestroy_v2(ev[0])

    def _is_pinned_impl(self, host: int, size: int) -> tuple[int, int, int] | None:
        """Memory registered by someone else (CuPy, PyTorch): (base, size, device address).
        A range only partly inside such a registration is refused (INVALID_ARGUMENT):
        recording it as pinned would send every copy down a path the driver refuses."""
        devs = self.initialized_devices()
        if not devs:
            return None
        devs[0].activate()
        found = registration(self.drv, host)
        if found is None:
            return None     # a foreign registration further in: cuMemHostRegister says 712
        base, n = found
        if host + size > base + n:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"0x{host:x} ({size} bytes) is partly registered by another "
                               f"library (0x{base:x}, {n} bytes): lock within that range")
        return base, n, self._device_pointer(devs[0].id, base)
