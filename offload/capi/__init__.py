"""offload as a drop-in `libomptarget.so.19.1` for clang-19 OpenMP programs (LLVM 19's C
ABI): `python -m offload.capi --libdir` prints the directory holding it, for
`LD_LIBRARY_PATH=$(python -m offload.capi --libdir) ./prog`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import libdir

__all__ = ["libdir"]


def __getattr__(name: str) -> Any:
    """`libdir` on first use: the library's own interpreter never builds the library
    (start-up)."""
    if name == "libdir":
        from .build import libdir
        return libdir
    raise AttributeError(f"module 'offload.capi' has no attribute {name!r}")
