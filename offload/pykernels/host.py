"""A Python kernel compiled for the host: numba's parallel loop (`njit(parallel=True)`,
prange on threads) behind a C-callable function (`cfunc`) taking each array as its
address and extents, as the host plugin launches every kernel."""
from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..image import Binary
from . import rewrite
from .signature import NUMERIC, ParamType, launch_params, prototype
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
    names, scratch = launch_params(src.params, rewrite.reduced(src),
                                   reduction_types(body, src))
    wrapper, ctypes_ = c_callable(src.name, body, numba.carray, (*sig, *scratch), names,
                                  used=len(sig), bool_as_int=True)
    sig = (*sig, *scratch)
    cf = numba.cfunc(types.void(*ctypes_))(wrapper)
    key = "\0".join([src.text, ",".join(map(str, sig)), numba.__version__, "host"])
    decl = prototype(src.name, sig, names)
    binary = Binary(key.encode(), "function", None, {src.name: decl},
                    hashlib.sha256(key.encode() + str(cf.address).encode()).hexdigest(),
                    functions={src.name: int(cf.address or 0)}, owner=cf)
    return binary, body


def c_callable(name: str, callee: Any, carray: Any, full: Sequence[ParamType],
               names: Sequence[str], used: int, lead: Sequence[str] = (),
               bool_as_int: bool = False) -> tuple[Any, list[Any]]:
    """A Python function `name(*lead, <each array as pointer and extents>, <scalars>)`
    that calls `callee(*lead, <the first `used` parameters, arrays rebuilt with
    `carray`>)`, and its numba C types after `lead`'s (int64 each)."""
    from numba import types
    params, call = list(lead), list(lead)
    ctypes_: list[Any] = [types.int64] * len(lead)
    for j, (t, p) in enumerate(zip(full, names, strict=True)):
        nt = numba_types(t)
        if t.ndim:
            dims = [f"{p}_extent{d}" for d in range(t.ndim)]
            params += [f"{p}_ptr", *dims]
            if j < used:
                call.append(f"__carray({p}_ptr, ({', '.join(dims)},))")
            ctypes_ += [types.CPointer(nt.dtype), *[types.int64] * t.ndim]
        else:
            params.append(p)
            call.append(p)
            ctypes_.append(types.int64 if bool_as_int and t.dtype == "bool" else nt)
    text = f"def {name}({', '.join(params)}):\n    __callee({', '.join(call)})\n"
    g: dict[str, Any] = {"__callee": callee, "__carray": carray}
    exec(compile(text, f"<offload wrapper of {name}>", "exec"), g)    # noqa: S102
    return g[name], ctypes_


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
            if not found or found[0] not in NUMERIC:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"kernel '{src.name}': the reduced scalar '{name}' is "
                                   f"{found[0] if found else 'of no type numba found'}; a "
                                   f"reduction needs an integer or float scalar")
            out[name] = found[0]
    return out

