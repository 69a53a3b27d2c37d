"""`compile_openmp`: C with `#pragma omp target` regions, compiled by clang-19 into a shared
library loaded into this process on offload's libomptarget.so.19.1, so its regions run on
the same runtime as the Python API and see the mappings made from Python."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
from typing import Any

from .. import config as _config
from .. import locks, runtime
from .._lazy import numpy as np
from ..compiler import cache_directory, compiler_identity
from ..errors import ErrorCode, OffloadError
from ..image import c_prototypes
from ..plugins.args import check_arguments, params_from_prototype
from ..runtime import current
from .abi import SONAME

__all__ = ["OpenMPModule", "compile_openmp"]

_loaded_lock = locks.new_lock()


def _new_loaded_lock() -> None:
    global _loaded_lock
    _loaded_lock = locks.new_lock()     # a forked child: another thread may have held it


runtime.at_fork_in_child(_new_loaded_lock)
_runtime_loaded: list[str] = []


def _llvm_libdir(clang: str) -> str:
    """Where clang-19 keeps libomp.so.5 (Debian: /usr/lib/llvm-19/lib)."""
    import subprocess  # (here and below: not at a C program's start)
    out = subprocess.run([clang, "-print-file-name=libomp.so.5"], capture_output=True,
                         text=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{clang} does not know where libomp.so.5 is (install libomp-19-dev)")
    return os.path.dirname(os.path.realpath(out))


def _load_runtimes(clang: str) -> None:
    """libomp and offload's libomptarget, loaded once, globally (the libraries clang-19
    builds need both by SONAME)."""
    with _loaded_lock:
        if _runtime_loaded:
            return
        ctypes.CDLL(os.path.join(_llvm_libdir(clang), "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
        from .build import libdir  # here: the library's own start-up skips it
        ours = os.path.join(libdir(), SONAME)
        ctypes.CDLL(ours, mode=ctypes.RTLD_GLOBAL)
        _runtime_loaded.append(ours)


class OpenMPModule:
    """The functions of a compiled OpenMP source, as attributes; numpy arrays pass as
    pointers (checked against the prototype's pointee type), scalars by value."""

    def __init__(self, path: str, protos: dict[str, str]):
        import cffi
        self.path = path
        self._ffi = cffi.FFI()
        self._params: dict[str, list] = {}
        for name, decl in protos.items():
            self._ffi.cdef(decl, override=True)
            self._params[name] = params_from_prototype(decl, name) or []
        self._lib = self._ffi.dlopen(path)
        self.names = sorted(protos)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.names})

    def __repr__(self) -> str:
        return f"<OpenMPModule {os.path.basename(self.path)}: {', '.join(self.names)}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._params:
            raise AttributeError(f"{os.path.basename(self.path)} has no function '{name}' "
                                 f"(it defines: {', '.join(self.names)})")
        fn = getattr(self._lib, name)
        params, ffi = self._params[name], self._ffi
        ctypes_ = ffi.typeof(fn).args

        def call(*args: Any) -> Any:
            check_arguments(name, params, args)
            conv = [ffi.cast(t, a.ctypes.data if isinstance(a, np.ndarray) else int(a))
                    if t.kind == "pointer" else a for t, a in zip(ctypes_, args, strict=True)]
            return fn(*conv)              # `args` keeps the arrays alive meanwhile
        call.__name__ = name
        return call


def _cuda_targets(llvm_lib: str) -> tuple[list[str], dict[str, str]]:
    """With a CUDA device and a CUDA toolkit: the flags that add its nvptx image (and the
    environment that finds LLVM's device runtime); else nothing."""
    import glob
    m = current().manager
    arch = next((p.architecture(0) for p in m.plugins if p.omp_image_kind == "nvptx"
                 and p.number_of_devices()), None)
    roots = [os.environ.get("CUDA_PATH", ""), "/usr/local/cuda", *sorted(
        glob.glob("/usr/local/cuda-*"), reverse=True)]
    toolkit = next((r for r in roots if r and os.path.exists(os.path.join(r, "bin", "ptxas"))),
                   None)
    if arch is None or toolkit is None:
        return [], {}
    return ([f"--offload-arch={arch}", f"--cuda-path={toolkit}"],
            {"LIBRARY_PATH": llvm_lib})


def compile_openmp(source: str, *, flags: tuple[str, ...] = ("-O2",),
                   clang: str | None = None, cache_dir: str | None = None) -> OpenMPModule:
    """Compile C with OpenMP target regions (clang-19: x86_64 offloading, plus an nvptx
    image for the CUDA devices' architecture where there are CUDA devices and a CUDA
    toolkit) and load it on offload's runtime.

    Args:
        source: C source; its external functions become the module's functions.
        flags: extra compiler flags (default -O2); part of the cache key.
        clang: the compiler (default clang-19).
        cache_dir: the cache (default OFFLOAD_CACHE_DIR, else ~/.cache/offload).

    Returns:
        An OpenMPModule: `mod.fn(array, n)` calls `fn` with the array's address.

    Raises:
        OffloadError: UNSUPPORTED without clang-19 or libomp-19-dev; INVALID_ARGUMENT
            with the compiler's messages when the source does not compile.

    Example:
        >>> m = offload.compile_openmp('''
        ... void inc(int *a, int n) {
        ... #pragma omp target map(tofrom: a[0:n])
        ...   for (int i = 0; i < n; i++) a[i] += 1;
        ... }''')
        >>> m.inc(a, a.size)
    """
    clang = clang or shutil.which("clang-19")
    if not clang:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           "compile_openmp needs clang-19 (Debian: clang-19, clang-tools-19, "
                           "libomp-19-dev)")
    cfg = _config.read()
    directory = cache_directory(cache_dir or cfg.cache_dir)
    gpu, env = _cuda_targets(_llvm_libdir(clang))
    targets = "x86_64-unknown-linux-gnu" + (",nvptx64-nvidia-cuda" if gpu else "")
    cmd = [clang, "-fopenmp", f"-fopenmp-targets={targets}", *gpu, "-shared", "-fPIC", *flags]
    key = hashlib.sha256("\0".join((compiler_identity(clang), " ".join(cmd), source))
                         .encode()).hexdigest()[:40]
    out = os.path.join(directory, f"omp-{key}.so")
    if not os.path.isfile(out):
        import subprocess
        import tempfile
        fd, src = tempfile.mkstemp(dir=directory, prefix=f"omp-{key}.", suffix=".c")
        tmp = out + f".{os.getpid()}.tmp"
        try:
            with os.fdopen(fd, "w") as f:
                f.write(source)
            res = subprocess.run([*cmd, src, "-o", tmp], capture_output=True, text=True,
                                 env={**os.environ, **env})
            if res.returncode:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"compile_openmp failed ({' '.join(cmd)}):\n"
                                   f"{res.stderr.strip()}")
            os.replace(tmp, out)
        finally:
            for leftover in (src, tmp):
                if os.path.exists(leftover):
                    os.unlink(leftover)
    _load_runtimes(clang)
    return OpenMPModule(out, c_prototypes(source))
