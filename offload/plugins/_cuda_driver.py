"""Bindings to the CUDA driver API (libcuda.so.1) through cffi ABI mode: declarations,
enum values, and the error check. No policy here; the hooks are in cuda.py."""
from __future__ import annotations

import cffi

from ..errors import ErrorCode, OffloadError
from ..ffi_cache import ffi_for

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
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags);
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
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes; size_t srcY; int srcMemoryType; const void *srcHost;
    CUdeviceptr srcDevice; void *srcArray; size_t srcPitch;
    size_t dstXInBytes; size_t dstY; int dstMemoryType; void *dstHost;
    CUdeviceptr dstDevice; void *dstArray; size_t dstPitch;
    size_t WidthInBytes; size_t Height;
} CUDA_MEMCPY2D;
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            int *options, void **optionValues);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                              const char *name);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                            size_t *paramSize);
CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction hfunc);
CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra);
"""

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_TIMEOUT = 702
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_ASSERT = 710
CUDA_ERROR_TOO_MANY_PEERS = 711
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
CUDA_ERROR_HARDWARE_STACK_ERROR = 714
CUDA_ERROR_ILLEGAL_INSTRUCTION = 715
CUDA_ERROR_MISALIGNED_ADDRESS = 716
CUDA_ERROR_INVALID_ADDRESS_SPACE = 717
CUDA_ERROR_INVALID_PC = 718
CUDA_ERROR_LAUNCH_FAILED = 719
CU_CTX_SCHED_BLOCKING_SYNC = 0x04
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
# errors after which the context is unusable: the process must be restarted
STICKY = {CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_TIMEOUT, CUDA_ERROR_ASSERT,
          CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_ILLEGAL_INSTRUCTION,
          CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_INVALID_ADDRESS_SPACE,
          CUDA_ERROR_INVALID_PC, CUDA_ERROR_LAUNCH_FAILED}
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_READ_ONLY = 0x08
CU_MEM_ATTACH_GLOBAL = 0x1
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DEFAULT = 0x0
CU_EVENT_DISABLE_TIMING = 0x2
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
CU_MEMORYTYPE_HOST = 1
CU_MEMORYTYPE_DEVICE = 2
ATTRIBUTES = {                                      # CU_DEVICE_ATTRIBUTE_*
    "multiprocessors": 16, "max threads per block": 1, "compute capability major": 75,
    "compute capability minor": 76, "unified addressing": 41, "async engines": 40,
    "pci bus id": 33, "pageable memory access": 88, "host register supported": 99,
    "read-only host register supported": 113, "max grid dim x": 5,
    "max shared memory per block optin": 97, "clock rate": 13,
    "max threads per multiprocessor": 39,
}

ffi = ffi_for("cuda", CDEF)     # parsed once per machine (ffi_cache)

_RESULT_CODES = {CUDA_ERROR_OUT_OF_MEMORY: ErrorCode.OUT_OF_RESOURCES,
                 CUDA_ERROR_INVALID_VALUE: ErrorCode.INVALID_VALUE,
                 CUDA_ERROR_NO_DEVICE: ErrorCode.NOT_FOUND}


class Driver:
    """libcuda with error checking: `drv.check(rc, what)` raises on failure. After an error
    that leaves the context unusable (an illegal address in a kernel, ...), `dead` says
    what happened and every later call fails at once with it."""

    def __init__(self, path: str):
        self.lib = ffi.dlopen(path)
        self.dead: str | None = None
        self.last_kernel: str | None = None         # for the message after a kernel fault
        self.has_param_info = hasattr(self.lib, "cuFuncGetParamInfo")   # CUDA >= 12.4

    def alive(self) -> None:
        """Raise the sticky error, if the context died."""
        if self.dead is not None:
            raise OffloadError(ErrorCode.BACKEND_FAILURE, self.dead)

    def text(self, rc: int) -> str:
        name = ffi.new("const char **")
        desc = ffi.new("const char **")
        n = ffi.string(name[0]).decode() if self.lib.cuGetErrorName(rc, name) == 0 else "?"
        d = ffi.string(desc[0]).decode() if self.lib.cuGetErrorString(rc, desc) == 0 else ""
        return f"{n} ({rc}): {d}"

    def check(self, rc: int, what: str) -> None:
        if rc == CUDA_SUCCESS:
            return
        if rc in STICKY:
            if self.dead is None:
                culprit = (f"kernel '{self.last_kernel}' faulted" if self.last_kernel
                           else "a kernel faulted")
                self.dead = (f"{culprit} ({self.text(rc)}, reported by {what}); CUDA cannot "
                             f"continue in this process: restart it")
            raise OffloadError(ErrorCode.BACKEND_FAILURE, self.dead)
        raise OffloadError(_RESULT_CODES.get(rc, ErrorCode.BACKEND_FAILURE),
                           f"{what} failed: {self.text(rc)}")


def ptr(addr: int) -> cffi.FFI.CData:
    """An integer address as `void *`."""
    return ffi.cast("void *", addr)
