"""CUDA plugin: the CUDA driver API through cffi ABI mode on libcuda.so.1.

Versioned entry points and explicit enum values; primary contexts; streams
as queues; cuMemHostRegister pinning; cubin/PTX images; NVRTC for
compile_cuda. Semantics (counts, splits, path choice) stay in common.py.
"""
from __future__ import annotations

import ctypes.util
import glob
import os
import threading
from typing import Any, Optional

import cffi

from ..errors import ErrorCode, OffloadError
from ..image import Binary, Image
from .common import AllocKind, GenericDevice, GenericPlugin, check_kernel_args, pack_scalar

CDEF = """
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;

CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFreeHost(void *p);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount, CUstream hStream);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                            size_t *paramSize);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra);
"""

NVRTC_CDEF = """
typedef int nvrtcResult;
typedef void *nvrtcProgram;
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
"""

# enum values, given explicitly (checked against cuda.h by tests/test_cuda_header.py)
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_READ_ONLY = 0x08
CU_MEM_ATTACH_GLOBAL = 0x1
CU_STREAM_NON_BLOCKING = 0x1
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
CU_MEMORYTYPE_HOST = 1
ATTRIBUTES = {                                      # CU_DEVICE_ATTRIBUTE_*
    "multiprocessors": 16, "max threads per block": 1, "compute capability major": 75,
    "compute capability minor": 76, "unified addressing": 41, "async engines": 40,
    "pci bus id": 33, "pageable memory access": 88, "host register supported": 99,
    "read-only host register supported": 113,
}

_ffi = cffi.FFI()
_ffi.cdef(CDEF)
_nvrtc_ffi = cffi.FFI()
_nvrtc_ffi.cdef(NVRTC_CDEF)

_RESULT_CODES = {CUDA_ERROR_OUT_OF_MEMORY: ErrorCode.OUT_OF_RESOURCES,
                 CUDA_ERROR_INVALID_VALUE: ErrorCode.INVALID_VALUE,
                 CUDA_ERROR_NO_DEVICE: ErrorCode.NOT_FOUND}


class _Driver:
    """libcuda with error checking: `drv.call('cuMemAlloc_v2', ...)` raises on failure."""

    def __init__(self, path: str):
        self.lib = _ffi.dlopen(path)

    def text(self, rc: int) -> str:
        name = _ffi.new("const char **")
        desc = _ffi.new("const char **")
        n = _ffi.string(name[0]).decode() if self.lib.cuGetErrorName(rc, name) == 0 else "?"
        d = _ffi.string(desc[0]).decode() if self.lib.cuGetErrorString(rc, desc) == 0 else ""
        return f"{n} ({rc}): {d}"

    def check(self, rc: int, what: str) -> None:
        if rc != CUDA_SUCCESS:
            raise OffloadError(_RESULT_CODES.get(rc, ErrorCode.BACKEND_FAILURE),
                               f"{what} failed: {self.text(rc)}")


_ptr = _ffi.cast


class CUDADevice(GenericDevice):
    plugin: "CUDAPlugin"

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
        self._functions: dict[tuple[int, str], tuple[Any, list[int]]] = {}

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
        for q in self._all_queues:
            lib.cuStreamDestroy_v2(q)
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
            drv.check(drv.lib.cuMemFreeHost(_ptr("void *", addr)), "cuMemFreeHost")
        else:
            drv.check(drv.lib.cuMemFree_v2(addr), "cuMemFree")

    def _submit_impl(self, tgt, host, size, queue, pinned) -> None:
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuMemcpyHtoDAsync_v2(
            tgt, _ptr("void *", host), size, queue), "cuMemcpyHtoDAsync")
        # a pageable source is staged by the driver before the call returns

    def _retrieve_impl(self, host, tgt, size, queue, pinned) -> None:
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuMemcpyDtoHAsync_v2(
            _ptr("void *", host), tgt, size, queue), "cuMemcpyDtoHAsync")
        # to pageable memory the driver returns only once the copy is complete

    def _exchange_impl(self, src, dst_device, dst, size, queue) -> bool:
        if not isinstance(dst_device, CUDADevice):
            return False
        self.activate()
        lib = self.plugin.drv.lib
        q = queue if queue is not None else self.get_queue()
        try:
            if dst_device is self:
                rc = lib.cuMemcpyDtoDAsync_v2(dst, src, size, q)
            else:
                rc = lib.cuMemcpyPeerAsync(dst, dst_device.context, src, self.context, size, q)
            self.plugin.drv.check(rc, "device-to-device copy")
            self._sync_impl(q)
        finally:
            if queue is None:
                self.release_queue(q)
        return True

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        self.activate()
        p = _ffi.new("void **")
        self.plugin.drv.check(self.plugin.drv.lib.cuMemAllocHost_v2(p, size),
                              "cuMemAllocHost(staging)")
        return int(_ffi.cast("uintptr_t", p[0])), self._create_queue_impl()

    def _free_staging_impl(self, addr: int, queue: Any) -> None:
        self.activate()
        self.plugin.drv.lib.cuMemFreeHost(_ptr("void *", addr))
        self.plugin.drv.lib.cuStreamDestroy_v2(queue)

    # ---- queues -----------------------------------------------------------
    def _create_queue_impl(self) -> Any:
        self.activate()
        s = _ffi.new("CUstream *")
        self.plugin.drv.check(self.plugin.drv.lib.cuStreamCreate(s, CU_STREAM_NON_BLOCKING),
                              "cuStreamCreate")
        return s[0]

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

    def function(self, module: Any, name: str) -> tuple[Any, list[int]]:
        cache = self._functions
        key = (int(_ffi.cast("uintptr_t", module)), name)
        if key in cache:
            return cache[key]
        self.activate()
        f = _ffi.new("CUfunction *")
        rc = self.plugin.drv.lib.cuModuleGetFunction(f, module, name.encode())
        if rc != CUDA_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' not found: {self.plugin.drv.text(rc)}")
        sizes = []
        off, size = _ffi.new("size_t *"), _ffi.new("size_t *")
        while self.plugin.drv.lib.cuFuncGetParamInfo(f[0], len(sizes), off, size) == 0:
            sizes.append(size[0])
        cache[key] = (f[0], sizes)
        return cache[key]

    def _launch_impl(self, program, binary, name, args, teams, threads, queue) -> None:
        fn, sizes = self.function(program, name)
        check_kernel_args(name, len(sizes), len(args), f"sizes {sizes}")
        params = _ffi.new("void *[]", max(1, len(args)))
        keep = []
        for i, (a, sz) in enumerate(zip(args, sizes)):
            c = _ffi.new("char[]", pack_scalar(a, sz, f"argument {i} of kernel '{name}'"))
            keep.append(c)
            params[i] = c
        grid = int(teams or 1)
        block = int(threads or 128)
        self.activate()
        self.plugin.drv.check(self.plugin.drv.lib.cuLaunchKernel(
            fn, grid, 1, 1, block, 1, 1, 0, queue, params, _ffi.NULL),
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


class CUDAPlugin(GenericPlugin):
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

    def __init__(self, config):
        super().__init__(config)
        self.tls = threading.local()
        self.drv: Optional[_Driver] = None

    def _init_impl(self) -> int:
        try:
            self.drv = _Driver(self.config.cuda_library)
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

    def check_binary(self, binary: Binary, dev: Optional[CUDADevice] = None) -> None:
        """Raise INVALID_BINARY unless `binary` is a cubin for dev's SM, or PTX."""
        if binary.format == "ptx":
            return
        e = binary.elf
        if e.machine != "EM_CUDA":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"image is {e.describe()}, not a CUDA cubin (EM_CUDA)")
        sm = cubin_sm(e.flags, e.abiversion)
        if dev is not None and not (sm // 10 == dev.sm[0] and sm % 10 <= dev.sm[1]):
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"cubin is for sm_{sm} (ELF ABI version {e.abiversion}), device "
                               f"{dev.id} is sm_{dev.sm[0]}{dev.sm[1]}")

    def architecture(self, d: int = 0) -> Optional[str]:
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
        self.drv.check(self.drv.lib.cuMemHostGetDevicePointer_v2(out, _ptr("void *", host), 0),
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
            rc = self.drv.lib.cuMemHostRegister_v2(_ptr("void *", host), size, flags)
            if rc == CUDA_ERROR_OUT_OF_MEMORY:
                raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                                   f"cuMemHostRegister(0x{host:x}, {size}) failed: "
                                   f"{self.drv.text(rc)}")
            self.drv.check(rc, f"cuMemHostRegister(0x{host:x}, {size})")
        return self._device_pointer(device, host)

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last:
            self.device(device).activate()
            self.drv.check(self.drv.lib.cuMemHostUnregister(_ptr("void *", host)),
                           f"cuMemHostUnregister(0x{host:x})")

    def _is_pinned_impl(self, host: int, size: int) -> Optional[tuple[int, int, int]]:
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


def cubin_sm(flags: int, abiversion: int) -> int:
    """The SM number in a cubin's e_flags: bits 8-15 from ELF ABI version 8 (CUDA 13), else 0-7."""
    return (flags >> 8) & 0xFF if abiversion >= 8 else flags & 0xFF


# ---- NVRTC --------------------------------------------------------------------------
_nvrtc = None


def _load_nvrtc():
    global _nvrtc
    if _nvrtc is not None:
        return _nvrtc
    from .. import config as _config
    path = _config.read().nvrtc_library
    cands = [path] if path else []
    cands += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"), reverse=True)
    try:
        import nvidia  # type: ignore  # pip's nvidia-cuda-nvrtc wheels
        for base in getattr(nvidia, "__path__", []):
            cands += sorted(glob.glob(os.path.join(base, "*", "lib", "libnvrtc.so*")),
                            reverse=True)
    except ImportError:
        pass
    cands += [n for n in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                          ctypes.util.find_library("nvrtc")) if n]
    for c in cands:
        try:
            _nvrtc = _nvrtc_ffi.dlopen(c)
            return _nvrtc
        except OSError:
            continue
    raise OffloadError(ErrorCode.UNSUPPORTED,
                       f"compile_cuda needs NVRTC (libnvrtc), not found "
                       f"(tried {len(cands)} names; set OFFLOAD_CUDA_NVRTC_LIBRARY)")


def compile_cuda(source: str, arch: str = "sm_90", ptx: bool = False) -> Image:
    """CUDA C++ -> cubin (or PTX, which the driver JIT-compiles) with NVRTC for `arch`
    (e.g. 'sm_90'; PTX is made for the matching 'compute_90')."""
    lib = _load_nvrtc()
    prog = _nvrtc_ffi.new("nvrtcProgram *")

    def check(rc, what):
        if rc != 0:
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"{what}: {_nvrtc_ffi.string(lib.nvrtcGetErrorString(rc)).decode()}")

    check(lib.nvrtcCreateProgram(prog, source.encode(), b"offload.cu", 0, _nvrtc_ffi.NULL,
                                 _nvrtc_ffi.NULL), "nvrtcCreateProgram")
    try:
        if ptx:
            arch = arch.replace("sm_", "compute_")
        opts = [_nvrtc_ffi.new("char[]", f"--gpu-architecture={arch}".encode())]
        rc = lib.nvrtcCompileProgram(prog[0], len(opts), opts)
        if rc != 0:
            n = _nvrtc_ffi.new("size_t *")
            lib.nvrtcGetProgramLogSize(prog[0], n)
            log = _nvrtc_ffi.new("char[]", n[0] + 1)
            lib.nvrtcGetProgramLog(prog[0], log)
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"compile_cuda failed:\n{_nvrtc_ffi.string(log).decode()}")
        n = _nvrtc_ffi.new("size_t *")
        get_size, get = ((lib.nvrtcGetPTXSize, lib.nvrtcGetPTX) if ptx
                         else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN))
        check(get_size(prog[0], n), "nvrtcGet(PTX|CUBIN)Size")
        out = _nvrtc_ffi.new("char[]", n[0])
        check(get(prog[0], out), "nvrtcGet(PTX|CUBIN)")
        data = bytes(_nvrtc_ffi.buffer(out, n[0])).rstrip(b"\0")
    finally:
        lib.nvrtcDestroyProgram(prog)
    return Image([Binary.from_bytes(data)])
