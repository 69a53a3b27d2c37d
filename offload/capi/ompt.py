"""OMPT at the C API: an OMPT tool of the program (found by libomp) hears offload's
target regions, data operations, kernel submissions and device events, as LLVM 19's
libomptarget tells them. The callbacks and the per-thread region state live in C
(ompt.c, part of the library); this side connects when the first program registers,
installs offload.tracing's tool so the runtime's data operations reach it, and marks the
regions, submissions and devices."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from .. import runtime, tracing
from .devices import registry

# ompt_target_t
TARGET, ENTER_DATA, EXIT_DATA, UPDATE = 1, 2, 3, 4

_lib: Any = None                 # the library's C functions (cffi lib), once connected
#: whether a tool takes this library's callbacks (the launch paths skip them when not)
listening = False
_announced: list[int] = []       # devices told to the tool (device_initialize), in order


class _Tool:
    """offload.tracing's tool: the runtime's data operations and image loads, to C."""

    def __init__(self, lib: Any):
        self.lib = lib
        self.initial = -1            # omp_get_initial_device(), once the runtime has started

    def _number(self, device: int | None) -> int:
        if device is not None:
            return device
        if self.initial < 0:
            rt = runtime._process.live
            self.initial = rt.num_devices() if rt is not None else 0
        return self.initial

    def data_op(self, begin: bool, op: int, src: int, src_device: int | None, dst: int,
                dst_device: int | None, size: int) -> None:
        self.lib.offload_ompt_data_op(int(begin), op, src, self._number(src_device), dst,
                                      self._number(dst_device), size)

    def image_loaded(self, device: Any, image: bytes) -> None:
        rt = runtime._process.live
        if rt is None:
            return
        number = next((d.number for d in rt.manager.initialized() if d.generic is device), -1)
        start = next((p.starts[k] for p in list(registry.programs.values())
                      for k, i in p.images.items() if i is image), 0)
        self.lib.offload_ompt_device_load(number, start, len(image))


def connect(lib: Any) -> bool:
    """Connect to libomp's OMPT once (LLVM: at the runtime's start); True when a tool
    takes callbacks this library calls: from then on the runtime tells it its data
    operations (tables off their fewer-steps paths, which tell no one)."""
    global _lib, listening
    if _lib is not None:
        return True
    if not lib.offload_ompt_connect():
        return False
    _lib, listening = lib, True
    tracing.tool = _Tool(lib)
    rt = runtime._process.live
    if rt is not None:
        for d in rt.manager.initialized():
            d.table.traced = True
    return True


def announce_devices(rt: Any) -> None:
    """device_initialize for each device not yet told, in number order (LLVM: when a
    program's images register, for the devices of the plugins they need)."""
    if _lib is None:
        return
    for n in range(rt.num_devices()):
        if n not in _announced:
            d = rt.manager.get_device(n)
            _announced.append(n)
            # LLVM's compute-unit kind: the architecture, 'generic-64bit' for the host
            kind = d.plugin.architecture(d.local_id) or "generic-64bit"
            _lib.offload_ompt_device_initialize(n, kind.encode())


def finalize_devices() -> None:
    """device_finalize for every device told, in order (the last program unregistered)."""
    if _lib is None:
        return
    for n in _announced:
        _lib.offload_ompt_device_finalize(n)
    _announced.clear()


_asked = threading.local()        # the teams the thread's target region asked for


@contextlib.contextmanager
def _region(kind: int, device: int, kargs: Any, teams: int) -> Iterator[None]:
    if kargs is not None:
        teams = int(kargs.NumTeams[0])
    teams &= 0xFFFFFFFF
    _asked.teams = 1 if teams == 0xFFFFFFFF else teams      # -1, no teams construct: one
    _lib.offload_ompt_target(kind, 1, device)
    try:
        yield
    finally:
        _lib.offload_ompt_target(kind, 0, device)


@contextlib.contextmanager
def _submit() -> Iterator[None]:
    teams = getattr(_asked, "teams", 0)
    _lib.offload_ompt_submit(1, teams)
    try:
        yield
    finally:
        _lib.offload_ompt_submit(0, teams)


_NOTHING = contextlib.nullcontext()    # what region and submit give without a tool


def region(kind: int, device: int, kargs: Any = None,
           teams: int = 0) -> contextlib.AbstractContextManager[None]:
    """`with region(kind, device):` around a construct: the tool's target callbacks;
    for a target region the teams it asked for: its KernelArgs' first (`kargs`), else
    `teams`."""
    return _NOTHING if _lib is None else _region(kind, device, kargs, teams)


def submit() -> contextlib.AbstractContextManager[None]:
    """`with submit():` around a kernel launch: the tool's target_submit callbacks."""
    return _NOTHING if _lib is None else _submit()
