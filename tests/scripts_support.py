"""The repository's own check scripts (scripts/), imported by the tests that run them."""
import importlib
import os
import sys
from types import ModuleType

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def check_layers() -> ModuleType:
    """scripts/check_layers.py as a module."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        return importlib.import_module("check_layers")
    finally:
        sys.path.pop(0)
