"""AMDGPU plugin over ROCr/HSA through cffi (ABI mode on libhsa-runtime64).

This session's scope: load the library, hsa_init, report agents or HSA's own
status string for why there are none. Memory, pinning and dispatch are the
AMDGPU issue's work.
"""
from __future__ import annotations

import cffi

from ..errors import ErrorCode, OffloadError
from .common import GenericPlugin

_ffi = cffi.FFI()
_ffi.cdef("""
    typedef enum { HSA_STATUS_SUCCESS = 0 } hsa_status_t;
    hsa_status_t hsa_init(void);
    hsa_status_t hsa_shut_down(void);
    hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string);
""")


class AMDGPUPlugin(GenericPlugin):
    name = "amdgpu"
    priority = 20

    def _init_impl(self) -> int:
        try:
            self._hsa = _ffi.dlopen(self.config.hsa_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.hsa_library} not loadable ({exc})") from None
        status = self._hsa.hsa_init()
        if status != 0:
            text = _ffi.new("const char **")
            msg = f"status 0x{int(status):x}"
            if self._hsa.hsa_status_string(status, text) == 0 and text[0] != _ffi.NULL:
                msg = _ffi.string(text[0]).decode()
            raise OffloadError(ErrorCode.BACKEND_FAILURE, f"hsa_init failed: {msg}")
        self._hsa.hsa_shut_down()
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           "HSA initialised, but agent support is not built yet (AMDGPU issue)")
