"""CUDA plugin placeholder; replaced by the CUDA issue's driver binding."""
from __future__ import annotations

import cffi

from ..errors import ErrorCode, OffloadError
from .common import GenericPlugin

_ffi = cffi.FFI()
_ffi.cdef("int cuInit(unsigned int); int cuDeviceGetCount(int *);")


class CUDAPlugin(GenericPlugin):
    name = "cuda"
    priority = 10

    def _init_impl(self) -> int:
        try:
            lib = _ffi.dlopen(self.config.cuda_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.cuda_library} not loadable ({exc})") from None
        rc = lib.cuInit(0)
        if rc != 0:
            raise OffloadError(ErrorCode.BACKEND_FAILURE, f"cuInit failed: CUresult {rc}")
        return 0


def compile_cuda(source: str, arch=None):
    raise OffloadError(ErrorCode.UNSUPPORTED, "compile_cuda needs the CUDA plugin")
