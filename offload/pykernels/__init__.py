"""Kernels written in Python: `@offload.kernel` over a function whose body is `prange`
loops, run by `offload.target` like any kernel (numba compiles it: `pip install
'offload[jit]'`). The core package imports none of this until a kernel is made."""
from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

from .. import locks
from .._lazy import numpy as np
from ..errors import ErrorCode, OffloadError
from ..image import Image, Kernel
from . import signature as _sig
from .markers import atomic_add, atomic_max, atomic_min, prange
from .signature import ParamType
from .source import Source, read

__all__ = ["PyKernel", "atomic_add", "atomic_max", "atomic_min", "kernel", "prange"]

_THREADS = 256                 # a GPU launch's default block
_WAVES = 8                     # default grid: blocks per multiprocessor, at most


def _need_numba(what: str) -> None:
    try:
        import numba  # noqa: F401
    except ImportError:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{what} needs numba: pip install 'offload[jit]' (numba, "
                           f"numba-cuda and NVRTC for GPUs)") from None


class PyKernel:
    """A Python function run as a kernel by `offload.target(k, *args, ...)`; called
    directly, it is the plain Python function."""

    def __init__(self, fn: Callable[..., None], signature: Sequence[str] | str | None = None):
        self.py_func = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.source: Source = read(fn)
        self.signature = None if signature is None else \
            _sig.parse(signature, fn.__name__, len(self.source.params))
        self._lock = locks.new_lock()
        self._host: dict[tuple[ParamType, ...], tuple[Any, Any]] = {}
        self._kernels: dict[tuple, Kernel] = {}
        self.compiles = {"host": 0, "cuda": 0}       # how many were made, by target
        self._seen: dict[tuple, tuple[ParamType, ...]] = {}     # argument kinds -> types
        self._dtypes: dict[tuple[ParamType, ...], list[str]] = {}  # reduced scalars' dtypes
        from . import rewrite
        self._reduced = rewrite.reduced(self.source)
        self._bounds = [[compile(ast.Expression(x), "<bound>", "eval") for x in loop.bounds]
                        for loop in self.source.loops.values()]

    def __call__(self, *args: Any) -> None:
        return self.py_func(*args)

    def __repr__(self) -> str:
        return f"<offload.kernel {self.__name__}>"

    def types_of(self, args: Sequence[Any]) -> tuple[ParamType, ...]:
        """The parameter types a call with `args` compiles for."""
        name = self.__name__
        if len(args) != len(self.source.params):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"kernel '{name}' takes {len(self.source.params)} "
                               f"argument(s) ({', '.join(self.source.params)}), got "
                               f"{len(args)}")
        if self.signature is not None:
            _sig.check_against(self.signature, args, name)
            return self.signature
        return tuple(_sig.of_argument(a, i, name) for i, a in enumerate(args))

    def __offload_kernel__(self, args: Sequence[Any], dev: Any, teams: int | None,
                           threads: int | None
                           ) -> tuple[Kernel, list[Any], Any, Any, list[Any]]:
        """The compiled kernel for `args` on `dev` (None: the initial device), the
        launch's arguments, its geometry and its scratch arrays (in the arguments;
        `target` gives them device memory or maps them)."""
        kinds = _kinds(args)
        types = self._seen.get(kinds) if kinds is not None else None
        if types is None:
            types = self.types_of(args)
            if kinds is not None and len(self._seen) < 64:
                self._seen[kinds] = types
        key = (id(dev), dev.plugin.name, dev.local_id) if dev is not None else None
        target = _targets.get(key) if key is not None else _HOST
        if target is None:
            target = _targets[key] = _Target.of(dev, self.__name__)
        kernel = self._kernel(types, target.cc)
        launch = _sig.expand(args)
        if target.cc is not None:
            # whole warps (the block reductions shuffle across them), at most 1024
            threads = min(1024, max(32, (threads or _THREADS) // 32 * 32))
            if teams is None:
                trip = self._trip(args)
                cap = _WAVES * target.sms
                teams = cap if trip is None else max(1, min(cap, -(-trip // threads)))
        scratch: list[Any] = []
        if self._reduced:
            scratch = self._scratch(types, (teams or 1) if target.cc is not None else 1)
            for s in scratch:
                launch += [s, s.size]
        return kernel, launch, teams, threads, scratch

    def _kernel(self, types: tuple[ParamType, ...], cc: tuple[int, int] | None) -> Kernel:
        key = (types, cc)
        k = self._kernels.get(key)
        if k is not None:
            return k
        _need_numba(f"kernel '{self.__name__}'")
        with self._lock:                               # one compile per signature
            k = self._kernels.get(key)
            if k is not None:
                return k
            binary, body = self._host_binary(types)
            binaries = [binary]
            if cc is not None:
                from . import cuda
                from .host import reduction_types
                binaries.append(cuda.compile_cuda(self.source, types,
                                                  reduction_types(body, self.source), cc))
                self.compiles["cuda"] += 1
            k = getattr(Image(binaries), self.__name__)
            self._kernels[key] = k
        return k

    def _host_binary(self, types: tuple[ParamType, ...]) -> tuple[Any, Any]:
        made = self._host.get(types)
        if made is None:
            from .host import compile_host
            made = self._host[types] = compile_host(self.source, types)
            self.compiles["host"] += 1
        return made

    def _scratch(self, types: tuple[ParamType, ...], blocks: int) -> list[Any]:
        """One element per block of the launch for each reduced scalar (on a GPU each
        block writes its value there, and later code combines them); the host's numba
        reduces on its own and leaves them alone."""
        dtypes = self._dtypes.get(types)
        if dtypes is None:
            from .host import reduction_types
            found = reduction_types(self._host_binary(types)[1], self.source)
            dtypes = self._dtypes[types] = [found[r] for r in self._reduced]
        n = max(1, blocks)
        return [np.empty(n, dtype=d) for d in dtypes]

    def _trip(self, args: Sequence[Any]) -> int | None:
        """The largest prange trip count, where the bounds use only the arguments."""
        env = dict(zip(self.source.params, args, strict=True))
        best = None
        for bounds in self._bounds:
            try:
                b = [int(eval(x, _BOUND_GLOBALS, env)) for x in bounds]   # noqa: S307
                n = len(range(*b))
            except Exception:                   # noqa: BLE001 - a bound from locals
                return None
            best = n if best is None else max(best, n)
        return best


_BOUND_GLOBALS: dict[str, Any] = {"__builtins__": {"len": len, "min": min, "max": max}}


def _kinds(args: Sequence[Any]) -> tuple | None:
    """What decides a call's types, cheaply (None: judge each argument)."""
    out: list[Any] = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            out.append((a.dtype.char, a.ndim, a.flags.c_contiguous))
        elif t is int or t is float or isinstance(a, np.number):
            out.append(t)
        else:
            return None
    return tuple(out)


class _Target:
    """What a device means for a Python kernel: its compute capability (None: the host
    binary) and multiprocessors."""

    def __init__(self, cc: tuple[int, int] | None, sms: int):
        self.cc = cc
        self.sms = sms

    @staticmethod
    def of(dev: Any, kernel: str) -> _Target:
        plugin = dev.plugin.name
        if plugin == "amdgpu":
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"kernel '{kernel}' is Python, and numba has no AMDGPU "
                               f"target: run it on the host (device=None) or on a CUDA "
                               f"device, or write it in HIP for compile_hip")
        if plugin != "cuda":
            return _HOST
        info = dev.info()
        return _Target(_cc(info.get("architecture", "")),
                       int(info.get("multiprocessors") or 16))


_HOST = _Target(None, 0)
_targets: dict[Any, _Target] = {}       # a device (id, plugin, number) -> its target


def _cc(arch: str) -> tuple[int, int]:
    """'sm_90' -> (9, 0)."""
    digits = arch.removeprefix("sm_")
    return (int(digits[:-1]), int(digits[-1])) if len(digits) >= 2 else (9, 0)


def kernel(fn: Callable[..., None] | None = None, *,
           signature: Sequence[str] | str | None = None) -> Any:
    """Make a Python function a kernel for `offload.target`: its body holds `for i in
    offload.prange(n):` loops over numpy arrays and scalars, compiled by numba for the
    host (threads) and for CUDA devices (the launch's teams x threads), once per argument
    types (or for `signature`, e.g. ['float32[:]', 'int64'])."""
    if fn is None:
        return lambda f: PyKernel(f, signature)
    return PyKernel(fn, signature)
