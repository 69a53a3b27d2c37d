"""A Python kernel compiled for the host: numba's parallel loop (`njit(parallel=True)`,
prange on threads) behind a C-callable function (`cfunc`) taking each array as its
address and extents, as the host plugin launches every kernel."""
from __future__ import annotations

import functools
import hashlib
import warnings
from typing import Any

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..image import Binary
from . import rewrite
from .signature import ParamType, prototype
from .source import Source


def numba_types(t: ParamType) -> Any:
    """numba's type of one parameter (arrays C-contiguous)."""
    from numba import types
    dt = types.boolean if t.dtype == "bool" else getattr(types, t.dtype)
    return types.Array(dt, t.ndim, "C") if t.ndim else dt


def compile_host(src: Source, sig: tuple[ParamType, ...]) -> tuple[Binary, Any]:
    """The host binary of `src` for `sig`, and numba's compiled body (whose types the GPU
    compile reads)."""
    import numba
    from numba import types
    body_name = f"{src.name}__body"
    tree = rewrite.host_module(src, body_name)
    g = dict(src.globals)
    g.update(rewrite.host_names())
    exec(compile(tree, src.filename, "exec"), g)          # noqa: S102 - the user's kernel
    body = numba.njit(parallel=parallel_layer())(g[body_name])
    try:
        body.compile(tuple(numba_types(t) for t in sig))
    except Exception as exc:                              # numba's errors name the line
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"kernel '{src.name}' cannot be compiled for the host (numba): "
                           f"{exc}") from None
    # the C-callable wrapper: arrays rebuilt from address and extents; the GPU's scratch
    # arrays of reduced scalars taken too (one prototype for every target), not used
    reds = reduction_types(body, src)
    scratch = [ParamType(reds[r], 1) for r in rewrite.reduced(src)]
    names = [*src.params, *[f"__red_{r}" for r in rewrite.reduced(src)]]
    params, call = [], []
    for j, (t, p) in enumerate(zip((*sig, *scratch), names, strict=True)):
        if t.ndim:
            dims = [f"{p}_extent{d}" for d in range(t.ndim)]
            params += [f"{p}_ptr", *dims]
            if j < len(sig):
                call.append(f"__carray({p}_ptr, ({', '.join(dims)},))")
        else:
            params.append(p)
            call.append(p)
    sig = (*sig, *scratch)
    text = (f"def {src.name}({', '.join(params)}):\n"
            f"    __body({', '.join(call)})\n")
    wg: dict[str, Any] = {"__body": body, "__carray": numba.carray}
    exec(compile(text, f"<offload wrapper of {src.name}>", "exec"), wg)  # noqa: S102
    ctypes_: list[Any] = []
    for t in sig:
        nt = numba_types(t)
        if t.ndim:
            ctypes_.append(types.CPointer(nt.dtype))
            ctypes_ += [types.int64] * t.ndim
        else:
            ctypes_.append(types.int64 if t.dtype == "bool" else nt)
    cf = numba.cfunc(types.void(*ctypes_))(wg[src.name])
    key = "\0".join([src.text, ",".join(map(str, sig)), numba.__version__, "host"])
    decl = prototype(src.name, sig, names)
    binary = Binary(key.encode(), "function", None, {src.name: decl},
                    hashlib.sha256(key.encode() + str(cf.address).encode()).hexdigest(),
                    functions={src.name: int(cf.address or 0)}, owner=cf)
    return binary, body


@functools.cache
def parallel_layer() -> bool:
    """Whether numba has a threading layer that takes parallel regions from several
    threads at once (tbb or omp): offload's queues and a user's threads launch kernels
    concurrently, and numba's workqueue layer aborts the process on that. Without one,
    prange loops run serially on the host, said once with an OffloadWarning."""
    import os

    import numba
    from numba.np.ufunc import parallel
    if not os.environ.get("NUMBA_THREADING_LAYER"):
        setattr(numba.config, "THREADING_LAYER", "threadsafe")  # noqa: B010
    layer: str
    try:
        parallel._launch_threads()
        layer = numba.threading_layer()
    except (ValueError, ImportError, RuntimeError):
        layer = "none"
    if layer in ("tbb", "omp"):
        return True
    warnings.warn(f"numba's threading layer here is {layer!r}, which cannot run parallel "
                  f"regions from several threads at once: Python kernels run their prange "
                  f"loops serially on the host (pip install tbb, or install libgomp)",
                  OffloadWarning, stacklevel=4)
    return False


def reduction_types(body: Any, src: Source) -> dict[str, str]:
    """The numpy dtype name numba gave each scalar a loop reduces (read from the host
    compile's types)."""
    cres = next(iter(body.overloads.values()))
    typemap = cres.type_annotation.typemap
    out: dict[str, str] = {}
    for loop in src.loops.values():
        for name in loop.reductions:
            found = [str(t) for k, t in typemap.items()
                     if k == name or (k.startswith(name + ".") and k[len(name) + 1:].isdigit())]
            if not found or found[0] not in _REDUCIBLE:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"kernel '{src.name}': the reduced scalar '{name}' is "
                                   f"{found[0] if found else 'of no type numba found'}; a "
                                   f"reduction needs an integer or float scalar")
            out[name] = found[0]
    return out


_REDUCIBLE = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                        "uint64", "float32", "float64"})
