"""A Python kernel compiled for CUDA: numba-cuda turns the rewritten kernel into one PTX
device function with a C symbol (numba-cuda makes no C-ABI kernels), and offload writes
the `.entry` of each phase that calls it, in the same PTX module. No GPU is needed to
compile: the target's compute capability is given."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from .. import locks
from .._lazy import numpy as np
from ..cache_dir import cache_directory, default_root
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from . import rewrite
from .indices import CAST
from .signature import NUMERIC, ParamType, launch_params, prototype
from .source import Source

_lock = locks.new_lock()
BLOCK = 256         # the threads of a launch of code between loops (thread 0 runs it)


_COMBINE = {"add": "v + w", "max": "max(v, w)", "min": "min(v, w)"}
# a block's threads (whole warps) combine their values: warp shuffles, then one value per
# warp through shared memory; every thread gets the block's value
_REDUCERS = """
def block(v):
    sm = cuda.shared.array(32, DT)
    lane = cuda.threadIdx.x % 32
    off = 16
    while off > 0:
        w = cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        v = {combine}
        off //= 2
    if lane == 0:
        sm[cuda.threadIdx.x // 32] = v
    cuda.syncthreads()
    v = sm[lane] if lane < (cuda.blockDim.x + 31) // 32 else IDENT
    off = 16
    while off > 0:
        w = cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        v = {combine}
        off //= 2
    v = cuda.shfl_sync(0xFFFFFFFF, v, 0)
    cuda.syncthreads()
    return v


def reduce(red, v):
    v = block(v)
    if cuda.threadIdx.x == 0:
        red[cuda.blockIdx.x] = v


def combine(red):
    v = IDENT
    i = cuda.threadIdx.x
    while i < red.shape[0]:
        w = red[i]
        v = {combine}
        i += cuda.blockDim.x
    return block(v)
"""


@functools.cache
def device_names() -> dict[str, Any]:
    """The GPU versions of the markers and the helpers of the rewritten code."""
    from numba import cuda, types
    names: dict[str, Any] = {"__cuda": cuda, CAST: types.uint64}
    for name in NUMERIC:
        t = getattr(np, name)
        lo, hi = (np.iinfo(t).min, np.iinfo(t).max) if np.dtype(t).kind in "iu" else \
            (-np.inf, np.inf)
        names[f"__ident_add_{name}"] = t(0)
        names[f"__ident_max_{name}"] = t(lo)
        names[f"__ident_min_{name}"] = t(hi)
        for op in ("add", "max", "min"):
            g: dict[str, Any] = {"cuda": cuda, "DT": getattr(types, name),
                                 "IDENT": names[f"__ident_{op}_{name}"]}
            exec(compile(_REDUCERS.format(combine=_COMBINE[op]),         # noqa: S102
                         f"<offload reduction {op} {name}>", "exec"), g)
            # each its own copy of `block` (one shared by both breaks NVVM's IR)
            g["block"] = cuda.jit(device=True, inline="always")(g["block"])
            for fn in ("reduce", "combine"):
                g[fn] = cuda.jit(device=True)(g[fn])
            names[f"__reduce_{op}_{name}"] = g["reduce"]
            names[f"__combine_{op}_{name}"] = g["combine"]
    return names


@contextlib.contextmanager
def _target_cc(cc: tuple[int, int]) -> Iterator[None]:
    """numba-cuda asks the current device for its compute capability when it compiles a
    helper; answer with the target's, so that compiling needs no GPU."""
    from numba.cuda import dispatcher

    class _Target:
        compute_capability = cc
    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Target
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def compile_cuda(src: Source, sig: tuple[ParamType, ...], reductions: dict[str, str],
                 cc: tuple[int, int]) -> Binary:
    """The PTX binary of `src` for `sig` (reductions: scalar -> dtype, from the host
    compile), with one entry per phase."""
    if not hasattr(np, "row_stack"):      # numba-cuda 0.30 names it; numpy 2.5 removed it
        np.row_stack = np.vstack
    import numba
    import numba_cuda
    from numba import cuda, types

    names, scratch = launch_params(src.params, rewrite.reduced(src), reductions)
    full = (*sig, *scratch)
    tree, phases = rewrite.cuda_function(src, f"{src.name}__inner", reductions)
    key = "\0".join([src.text, ",".join(map(str, full)), numba.__version__,
                     numba_cuda.__version__, f"sm_{cc[0]}{cc[1]}", _generator()])
    digest = hashlib.sha256(key.encode()).hexdigest()
    ptx = _cached(digest)
    if ptx is None:
        ptx = _compile(src, tree, full, names, cc, cuda, types)
        ptx = ptx + _entries(src.name, ptx, len(phases) if len(phases) > 1 or
                             phases[0].single else 0)
        _store(digest, ptx)
    decl = prototype(src.name, full, names)
    binary = Binary.from_bytes(ptx.encode(), {src.name: decl})
    if len(phases) > 1 or phases[0].single:
        binary.phases = {src.name: tuple(
            (f"{src.name}__{k}", (1, BLOCK) if p.single else None)
            for k, p in enumerate(phases))}
        binary.prototypes.update({f"{src.name}__{k}": decl.replace(
            f"void {src.name}(", f"void {src.name}__{k}(") for k in range(len(phases))})
    return binary


@functools.cache
def _generator() -> str:
    """offload's own part of what a kernel compiles to: the code that rewrites it."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in ("source.py", "rewrite.py", "indices.py", "cuda.py"):
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _compile(src: Source, tree: Any, full: Sequence[ParamType], names: Sequence[str],
             cc: tuple[int, int], cuda: Any, types: Any) -> str:
    from numba.cuda.np.numpy_support import carray

    from .host import c_callable
    g = dict(src.globals)
    g.update(device_names())
    with _lock, _target_cc(cc):
        try:
            exec(compile(tree, src.filename, "exec"), g)      # noqa: S102 - the kernel
            inner = cuda.jit(device=True)(g[f"{src.name}__inner"])
            wrapper, ctypes_ = c_callable(f"{src.name}__c", inner, carray, full, names,
                                          used=len(full), lead=("__phase",))
            ptx, _ = cuda.compile(wrapper, types.void(*ctypes_), device=True,
                                  abi="c", output="ptx", cc=cc,
                                  abi_info={"abi_name": f"{src.name}__c"})
        except OffloadError:
            raise
        except Exception as exc:                       # numba's errors name the line
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"kernel '{src.name}' cannot be compiled for CUDA "
                               f"(numba-cuda): {exc}") from None
    return str(ptx)


_PARAM = re.compile(r"\.param\s+\.(\w+)\s+(\w+)")
_REG = {"b64": ("rd", "b64"), "u64": ("rd", "b64"), "s64": ("rd", "b64"),
        "f64": ("fd", "f64"), "f32": ("f", "f32"), "b32": ("r", "b32"),
        "u32": ("r", "b32"), "s32": ("r", "b32"), "b8": ("rs", "b16"),
        "u8": ("rs", "b16"), "s8": ("rs", "b16"), "b16": ("rs", "b16"),
        "u16": ("rs", "b16"), "s16": ("rs", "b16")}


def _entries(name: str, ptx: str, count: int) -> str:
    """PTX `.entry` kernels calling the device function `<name>__c` with the phase number
    first: `name` for a kernel of one loop (`count` 0), else `name__0`, `name__1`, ..."""
    m = re.search(rf"\.func\s*(\(\s*\.param\s+\.(\w+)\s+\w+\s*\))?\s*{name}__c\s*\(([^)]*)\)",
                  ptx)
    if m is None:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"kernel '{name}': numba-cuda's PTX has no function {name}__c")
    ret = m.group(2)
    params = _PARAM.findall(m.group(3))[1:]           # the phase is ours to give
    out = []
    for k in range(max(count, 1)):
        entry = name if count == 0 else f"{name}__{k}"
        decl = ",\n".join(f"\t.param .{t} {entry}_param_{i}" for i, (t, _) in
                          enumerate(params))
        regs: dict[str, int] = {}
        loads, stores, args = [], [], []
        for i, (t, _) in enumerate(params):
            prefix, cls = _REG[t]
            n = regs.get(prefix, 0) + 1
            regs[prefix] = n
            reg = f"%{prefix}{n}"
            loads.append(f"\tld.param.{t if t[0] != 'b' else cls} {reg}, "
                         f"[{entry}_param_{i}];")
            stores.append(f"\t.param .{t} a{i};\n\tst.param.{t} [a{i}], {reg};")
            args.append(f"a{i}")
        decls = "\n".join(f"\t.reg .{_cls(p)} %{p}<{n + 1}>;" for p, n in regs.items())
        ret_decl = f"\t.param .{ret} r;\n" if ret else ""
        call = f"\tcall.uni {'(r), ' if ret else ''}{name}__c, (ph, {', '.join(args)});"
        out.append(f"\n.visible .entry {entry}(\n{decl}\n)\n{{\n{decls}\n"
                   + "\n".join(loads) + "\n\t{\n"
                   + f"\t.param .b64 ph;\n\tst.param.b64 [ph], {k};\n"
                   + "\n".join(stores) + f"\n{ret_decl}{call}\n\t}}\n\tret;\n}}\n")
    return "".join(out)


def _cls(prefix: str) -> str:
    return {"rd": "b64", "fd": "f64", "f": "f32", "r": "b32", "rs": "b16"}[prefix]


def _cache_path(digest: str) -> str:
    return os.path.join(cache_directory(os.path.join(default_root(), "pykernels")),
                        f"{digest}.ptx")


def _cached(digest: str) -> str | None:
    from ..compiler import _read_own
    data = _read_own(_cache_path(digest))
    return None if data is None else data.decode()


def _store(digest: str, ptx: str) -> None:
    path = _cache_path(digest)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(ptx)
        os.replace(tmp, path)               # whole, or not there: another process may read
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
