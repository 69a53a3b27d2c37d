"""CUDA plugin hooks: primary contexts, streams as queues, cuMemHostRegister pinning,
cubin/PTX images. Bindings are in _cuda_driver.py, NVRTC in nvrtc.py; semantics
(counts, splits, path choice) stay in common.py."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..config import Config
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..targets import cubin_sm
from ._cuda_driver import (
    ATTRIBUTES,
    CU_MEM_ATTACH_GLOBAL,
    CU_MEMHOSTREGISTER_DEVICEMAP,
    CU_MEMHOSTREGISTER_PORTABLE,
    CU_MEMHOSTREGISTER_READ_ONLY,
    CU_MEMORYTYPE_HOST,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    CU_STREAM_NON_BLOCKING,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NO_DEVICE,
    CUDA_ERROR_NOT_READY,
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    Driver,
    ffi,
)
from ._cuda_driver import ptr as _ptr
from .args import pack_scalar, params_from_prototype
from .common import AllocKind, GenericDevice, GenericKernel, GenericPlugin

_ffi = ffi

class CUDADevice(GenericDevice):
    plugin: CUDAPlugin

    def _init_impl(self) -> None:
        drv = self.plugin.drv
        dev = _ffi.new("CUdevice *")
        drv.check(drv.lib.cuDeviceGet(dev, self.id), "cuDeviceGet")
        self.cu_device = dev[0]
        ctx = _ffi.new("CUcontext *")
        drv.check(drv.lib.cuDevicePrimaryCtxRetain(ctx, self.cu_device),
                  "cuDevicePrimaryCtxRetain")
        self.context = ctx[0]
        self.sm = (self._attr("compute capability major"), self._attr("compute capability minor"))

    def activate(self) -> None:
        """Make this device's primary context current on the calling thread."""
        tls = self.plugin.tls
        if getattr(tls, "ctx", None) != self.context:
            self.plugin.drv.check(self.plugin.drv.lib.cuCtxSetCurrent(self.context),
                                  "cuCtxSetCurrent")
            tls.ctx = self.context

    def _attr(self, name: str) -> int:
        v = _ffi.new("int *")
        self.plugin.drv.check(self.plugin.drv.lib.cuDeviceGetAttribute(
            v, ATTRIBUTES[name], self.cu_device), f"cuDeviceGetAttribute({name})")
        return v[0]

    def _deinit_impl(self) -> None:
        lib = self.plugin.drv.lib
        self.activate()
        self.queues.destroy_all()
        for mod in self._loaded.values():
            lib.cuModuleUnload(mod)
        lib.cuDevicePrimaryCtxRelease_v2(self.cu_device)
        self.plugin.tls.ctx = None

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
            drv.check(drv.lib.cuMemAllocManaged(d, size, CU_MEM_ATTACH_GLOBAL),
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

    def _submit_impl(self, tgt, host, size, queue, pinned) -> None:
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuMemcpyHtoDAsync_v2(
            tgt, _ptr(host), size, queue), "cuMemcpyHtoDAsync")
        # a pageable source is staged by the driver before the call returns

    def _retrieve_impl(self, host, tgt, size, queue, pinned) -> None:
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuMemcpyDtoHAsync_v2(
            _ptr(host), tgt, size, queue), "cuMemcpyDtoHAsync")
        # to pageable memory the driver returns only once the copy is complete

    def _exchange_impl(self, src, dst_device, dst, size, queue) -> bool:
        if not isinstance(dst_device, CUDADevice):
            return False
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

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        self.activate()
        p = _ffi.new("void **")
        self.plugin.drv.check(self.plugin.drv.lib.cuMemAllocHost_v2(p, size),
                              "cuMemAllocHost(staging)")
        return int(_ffi.cast("uintptr_t", p[0])), self._create_queue_impl()

    def _free_staging_impl(self, addr: int, queue: Any) -> None:
        self.activate()
        self.plugin.drv.lib.cuMemFreeHost(_ptr(addr))
        self.plugin.drv.lib.cuStreamDestroy_v2(queue)

    # ---- queues -----------------------------------------------------------
    def _create_queue_impl(self) -> Any:
        self.activate()
        s = _ffi.new("CUstream *")
        self.plugin.drv.check(self.plugin.drv.lib.cuStreamCreate(s, CU_STREAM_NON_BLOCKING),
                              "cuStreamCreate")
        return s[0]

    def _destroy_queue_impl(self, queue: Any) -> None:
        self.plugin.drv.lib.cuStreamDestroy_v2(queue)

    def _sync_impl(self, queue: Any) -> None:
        if queue is None:
            self.activate()
            self.plugin.drv.check(self.plugin.drv.lib.cuCtxSynchronize(), "cuCtxSynchronize")
            return
        self.plugin.drv.check(self.plugin.drv.lib.cuStreamSynchronize(queue),
                              "cuStreamSynchronize")

    def _query_impl(self, queue: Any) -> bool:
        rc = self.plugin.drv.lib.cuStreamQuery(queue)
        if rc == CUDA_ERROR_NOT_READY:
            return False
        self.plugin.drv.check(rc, "cuStreamQuery")
        return True

    # ---- kernels ----------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        self.activate()
        mod = _ffi.new("CUmodule *")
        data = binary.data + (b"\0" if binary.format == "ptx" else b"")
        buf = _ffi.from_buffer(data)
        self.plugin.drv.check(self.plugin.drv.lib.cuModuleLoadData(mod, buf),
                              f"cuModuleLoadData({binary.describe()})")
        return mod[0]

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        self.activate()
        f = _ffi.new("CUfunction *")
        rc = self.plugin.drv.lib.cuModuleGetFunction(f, program, name.encode())
        if rc != CUDA_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' not found: {self.plugin.drv.text(rc)}")
        sizes: list[int] = []
        off, size = _ffi.new("size_t *"), _ffi.new("size_t *")
        while self.plugin.drv.lib.cuFuncGetParamInfo(f[0], len(sizes), off, size) == 0:
            sizes.append(size[0])
        decl = binary.prototypes.get(name)
        types = params_from_prototype(decl, name) if decl else None
        return GenericKernel(name, f[0], sizes, decl or f"parameter sizes {sizes}", types)

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any) -> None:
        name = kernel.name
        params = _ffi.new("void *[]", max(1, len(args)))
        keep = []
        for i, (a, sz) in enumerate(zip(args, kernel.params, strict=False)):
            c = _ffi.new("char[]", pack_scalar(a, sz, f"argument {i} of kernel '{name}'"))
            keep.append(c)
            params[i] = c
        grid = int(teams or 1)
        block = int(threads or 128)
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuLaunchKernel(
            kernel.handle, grid, 1, 1, block, 1, 1, 0, queue, params, _ffi.NULL),
            f"cuLaunchKernel({name}, grid={grid}, block={block})")

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
    device_class = CUDADevice
    asynchronous = True
    device_pool_bytes = 1 << 30     # reuse freed device memory (up to 1 GiB)
    # unpinned pieces of 4 MiB and up are staged, 4 MiB at a time, by up to 16 workers with
    # two buffers each (chosen with bench/staging.py on an H200: see bench/RESULTS.md)
    staging_threshold = 4 << 20
    staging_chunk = 4 << 20
    staging_lanes = 32

    drv: Driver            # set by _init_impl, before any device exists

    def __init__(self, config: Config):
        super().__init__(config)
        self.tls = threading.local()
        

    def _init_impl(self) -> int:
        try:
            self.drv = Driver(self.config.cuda_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.cuda_library} not loadable ({exc})") from None
        rc = self.drv.lib.cuInit(0)
        if rc == CUDA_ERROR_NO_DEVICE:
            raise OffloadError(ErrorCode.NOT_FOUND, f"cuInit: {self.drv.text(rc)}")
        self.drv.check(rc, "cuInit")
        n = _ffi.new("int *")
        self.drv.check(self.drv.lib.cuDeviceGetCount(n), "cuDeviceGetCount")
        if n[0] == 0:
            self.reason = "the driver reports no CUDA device"
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
        dev = self.device(d)
        dev.activate()
        out = _ffi.new("CUdeviceptr *")
        self.drv.check(self.drv.lib.cuMemHostGetDevicePointer_v2(out, _ptr(host), 0),
                       "cuMemHostGetDevicePointer")
        return int(out[0])

    # ---- pinning hooks ----------------------------------------------------
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        dev = self.device(device)
        if first:
            flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP
            if read_only:
                flags |= CU_MEMHOSTREGISTER_READ_ONLY
            dev.activate()
            rc = self.drv.lib.cuMemHostRegister_v2(_ptr(host), size, flags)
            if rc == CUDA_ERROR_OUT_OF_MEMORY:
                raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                                   f"cuMemHostRegister(0x{host:x}, {size}) failed: "
                                   f"{self.drv.text(rc)}")
            self.drv.check(rc, f"cuMemHostRegister(0x{host:x}, {size})")
        try:
            return self._device_pointer(device, host)
        except BaseException:            # registered, but unusable: take it back
            if first:
                self.drv.lib.cuMemHostUnregister(_ptr(host))
            raise

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last:
            self.device(device).activate()
            self.drv.check(self.drv.lib.cuMemHostUnregister(_ptr(host)),
                           f"cuMemHostUnregister(0x{host:x})")

    def _is_pinned_impl(self, host: int, size: int) -> tuple[int, int, int] | None:
        """Memory registered by someone else (CuPy, PyTorch): (base, size, device address)."""
        devs = self.initialized_devices()
        if not devs:
            return None
        devs[0].activate()
        mtype = _ffi.new("unsigned int *")
        rc = self.drv.lib.cuPointerGetAttribute(mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host)
        if rc == CUDA_ERROR_INVALID_VALUE or (rc == 0 and mtype[0] != CU_MEMORYTYPE_HOST):
            return None                 # pageable: not pinned, not an error
        self.drv.check(rc, "cuPointerGetAttribute(MEMORY_TYPE)")
        start = _ffi.new("CUdeviceptr *")
        rsize = _ffi.new("size_t *")
        if (self.drv.lib.cuPointerGetAttribute(start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                               host) != 0 or
                self.drv.lib.cuPointerGetAttribute(rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                                   host) != 0):
            base, n = host, size
        else:
            base, n = int(start[0]), int(rsize[0])
        return base, n, self._device_pointer(devs[0].id, base)
