"""NVRTC through cffi: CUDA C++ source to cubin or PTX images (compile_cuda)."""
from __future__ import annotations

import ctypes.util
import glob
import os
import re
from typing import Any

from .. import config as _config
from ..errors import ErrorCode, OffloadError
from ..ffi_cache import ffi_for
from ..image import Binary, Image, c_prototypes

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

# enum values, given explicitly (checked against cuda.h by tests/plugins/cuda/test_cuda_header.py)

_nvrtc_ffi = ffi_for("nvrtc", NVRTC_CDEF)     # parsed once per machine (ffi_cache)
_nvrtc: Any | None = None


def _load_nvrtc() -> Any:
    global _nvrtc
    if _nvrtc is not None:
        return _nvrtc
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


_CUDA_WORDS = re.compile(r'extern\s+"C"|__global__|__device__|__host__|__restrict__|'
                         r'__restrict\b|__launch_bounds__\s*\([^)]*\)')


def kernel_prototypes(source: str) -> dict[str, str]:
    """C declarations of the `extern "C" __global__` kernels in CUDA source (types that
    C does not know are left to the driver: those kernels are checked by count only)."""
    source = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", source)
    kernels = re.findall(r'extern\s+"C"\s+__global__[^;{]*?\b([A-Za-z_]\w*)\s*\(', source)
    protos = c_prototypes(_CUDA_WORDS.sub(" ", source))
    return {k: protos[k] for k in kernels if k in protos}


def compile_cuda(source: str, arch: str = "sm_90", ptx: bool = False) -> Image:
    """CUDA C++ -> cubin (or PTX, which the driver JIT-compiles) with NVRTC for `arch`
    (e.g. 'sm_90'; PTX is made for the matching 'compute_90')."""
    lib = _load_nvrtc()
    prog = _nvrtc_ffi.new("nvrtcProgram *")

    def check(rc: int, what: str) -> None:
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
    return Image([Binary.from_bytes(data, kernel_prototypes(source))])
