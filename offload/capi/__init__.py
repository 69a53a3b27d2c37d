"""offload as a drop-in `libomptarget.so.19.1` for clang-19 OpenMP programs (LLVM 19's C
ABI): `python -m offload.capi --libdir` prints the directory holding it, for
`LD_LIBRARY_PATH=$(python -m offload.capi --libdir) ./prog`."""
from __future__ import annotations

from .build import libdir

__all__ = ["libdir"]
