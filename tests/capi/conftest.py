"""The drop-in's path tests' fixture: `spied` counts the table's single-range steps and
general rules while constructs run through the library's own exports in this process."""
import ctypes
import os

import pytest

import offload
from offload.capi import abi
from tests.capi_support import LLVM_LIB, construct, ours  # noqa: F401 - fixture


@pytest.fixture
def spied(runtime, monkeypatch, ours):  # noqa: F811 - the fixture above
    """(table, calls, construct): the table, its counted calls, a data construct."""
    runtime()
    ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(ours, abi.SONAME), mode=ctypes.RTLD_GLOBAL)
    table = offload.runtime.current().device(0).table
    calls = {}

    def spy(name):
        step = name in table.steps._fields            # a step: the compiled core's or ours
        real = getattr(table.steps if step else table, name)

        def counted(*args, **kw):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kw)
        if step:
            monkeypatch.setattr(table, "steps", table.steps._replace(**{name: counted}))
        else:
            monkeypatch.setattr(table, name, counted)
    for name in ("begin_single_range", "end_single_range", "update_single_range",
                 "target_data_begin", "target_data_end", "target_data_update"):
        spy(name)
    return table, calls, lambda *args, **kw: construct(lib, *args, **kw)

