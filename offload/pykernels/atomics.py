"""offload's atomics compiled for the host: one LLVM `atomicrmw` on the element (numba's
CPU target has none of its own)."""
from __future__ import annotations

import functools
from typing import Any


@functools.cache
def host_atomics() -> dict[str, Any]:
    """numba intrinsics for atomic_add / atomic_max / atomic_min, by marker name."""
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def make(op: str) -> Any:
        @intrinsic
        def atomic(typingctx: Any, ary: Any, idx: Any, val: Any) -> Any:
            if not isinstance(ary, types.Array):
                return None
            dt = ary.dtype
            if isinstance(idx, types.BaseTuple):
                items: Any = idx
                if len(idx) != ary.ndim or not all(isinstance(t, types.Integer)
                                                   for t in items):
                    return None
            elif not (isinstance(idx, types.Integer) and ary.ndim == 1):
                return None
            if not isinstance(dt, (types.Integer, types.Float)):
                return None

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                aryty, idxty, valty = sig.args
                a, i, v = args
                arr = context.make_array(aryty)(context, builder, a)
                if isinstance(idxty, types.BaseTuple):
                    inds = cgutils.unpack_tuple(builder, i, len(idxty))
                    itys = list(getattr(idxty, "types", ()))
                else:
                    inds, itys = [i], [idxty]
                inds = [context.cast(builder, x, t, types.intp)
                        for x, t in zip(inds, itys, strict=True)]
                shape = cgutils.unpack_tuple(builder, arr.shape, aryty.ndim)
                strides = cgutils.unpack_tuple(builder, arr.strides, aryty.ndim)
                ptr = cgutils.get_item_pointer2(context, builder, arr.data, shape, strides,
                                                aryty.layout, inds, wraparound=True)
                v = context.cast(builder, v, valty, dt)
                if isinstance(dt, types.Float):
                    llop = {"add": "fadd", "max": "fmax", "min": "fmin"}[op]
                elif getattr(dt, "signed", True):
                    llop = op
                else:
                    llop = {"add": "add", "max": "umax", "min": "umin"}[op]
                return builder.atomic_rmw(llop, ptr, v, "seq_cst")
            return dt(ary, idx, val), codegen
        return atomic

    return {f"atomic_{op}": make(op) for op in ("add", "max", "min")}
