"""numpy as the package's modules import it: numpy itself in a Python program; in a C
program on the drop-in library (whose constructs pass addresses, not arrays) a stand-in
that imports numpy when first used, so the library's start-up does without it."""
from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

__all__ = ["numpy", "numpy_imported"]


class _OnFirstUse:
    """A module imported at the first attribute looked up on it."""

    def __init__(self, name: str):
        self._name = name
        self._module: Any = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        value = getattr(module, attr)
        self.__dict__[attr] = value         # found without __getattr__ from now on
        return value

    def __repr__(self) -> str:
        return f"<{self._name}, imported on first use>"


if TYPE_CHECKING or not getattr(sys, "_offload_capi_owns_python", False):
    import numpy as numpy
else:
    numpy = _OnFirstUse("numpy")


def numpy_imported() -> bool:
    """Whether numpy has been imported (always, in a Python program)."""
    return not isinstance(numpy, _OnFirstUse) or numpy._module is not None
