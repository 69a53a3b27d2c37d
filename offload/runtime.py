"""The one per-process state: a Runtime owns the PluginManager, the default device,
the nowait pool, and the exit and fork hooks."""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import config as _config
from .config import Config, TargetOffload
from .device import Device
from .errors import ErrorCode, OffloadError
from .plugin_manager import PluginManager

omp_initial_device = -1
omp_invalid_device = -2


class Handle:
    """A `nowait` construct in flight; `wait()` returns its result or raises its error."""

    def __init__(self, future: concurrent.futures.Future, owner: NowaitPool, thread: int):
        self._future = future
        self._owner = owner
        self._thread = thread

    def wait(self) -> Any:
        """Block until the work is done; return its result or raise what it raised."""
        try:
            return self._future.result()
        finally:
            self._owner.forget(self)

    def done(self) -> bool:
        """Whether the work has finished (successfully or not)."""
        return self._future.done()


class NowaitPool:
    """Worker threads for `nowait` constructs, and each thread's outstanding handles."""

    def __init__(self, workers: int = 8):
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._handles: dict[int, list[Handle]] = {}     # spawning thread -> its handles

    def spawn(self, fn: Callable[..., Any], *args: Any) -> Handle:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix="offload-nowait")
            thread = threading.get_ident()
            h = Handle(self._pool.submit(fn, *args), self, thread)
            self._handles.setdefault(thread, []).append(h)
        return h

    def forget(self, h: Handle) -> None:
        with self._lock:
            mine = self._handles.get(h._thread)
            if mine is not None and h in mine:
                mine.remove(h)
                if not mine:
                    del self._handles[h._thread]

    def pending(self) -> int:
        with self._lock:
            return sum(1 for hs in self._handles.values() for h in hs if not h.done())

    def wait(self, thread: int | None = None) -> None:
        """Wait for the handles spawned by `thread` (every thread's when None); raise
        the first error among them after all have finished."""
        first: BaseException | None = None
        while True:
            with self._lock:
                if thread is None:
                    todo = [h for hs in self._handles.values() for h in hs]
                else:
                    todo = list(self._handles.get(thread, ()))
            if not todo:
                break
            for h in todo:
                try:
                    h.wait()
                except BaseException as exc:   # noqa: BLE001 - re-raised below
                    first = first or exc
        if first is not None:
            raise first

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class Runtime:
    """The runtime of this process: plugins and devices, the default device, nowait work."""

    def __init__(self, config: Config):
        self.config = config
        self.manager = PluginManager(config)
        self._icv = threading.local()         # default-device-var, per thread as in libomp
        self.nowait = NowaitPool()
        self.is_shut = False

    @property
    def default_device(self) -> int:
        """The calling thread's default device (OpenMP's default-device-var): what
        omp_set_default_device set on this thread, else OMP_DEFAULT_DEVICE (0)."""
        return getattr(self._icv, "device", self.config.default_device)

    @default_device.setter
    def default_device(self, n: int) -> None:
        self._icv.device = n

    def num_devices(self) -> int:
        """Offload devices; the initial device's number is this value."""
        return self.manager.num_devices()

    def device(self, n: Any) -> Device | None:
        """The Device for a device number; None for the initial device (the host).

        None picks the default device; with no device at all, that is the initial device
        (LLVM's host fallback). A number that is neither a device nor the initial device
        raises INVALID_VALUE, as LLVM aborts."""
        m = self.manager
        count = m.num_devices()
        if n is None:
            n = self.default_device
            if count == 0:
                return None
        if isinstance(n, np.integer):
            n = int(n)
        if n == omp_initial_device or n == count:
            return None
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < count:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"device number '{n}' out of range, only {count} devices "
                               f"available")
        return m.get_device(n)

    def construct_device(self, n: Any) -> Device | None:
        """The device of a construct (target, target_data, enter/exit data, update).

        As `device`, except that with OMP_TARGET_OFFLOAD=mandatory and no device at all
        every construct fails, the initial device included (LLVM's
        offloading/mandatory_but_no_devices)."""
        if self.config.target_offload is TargetOffload.MANDATORY and self.num_devices() == 0:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "failure of target construct while offloading is mandatory\n"
                               "  (OMP_TARGET_OFFLOAD=mandatory and no offload device is "
                               "available; offload-info says why)")
        return self.device(n)

    def shutdown(self) -> None:
        """Finish nowait work, then tear every plugin down (SEMANTICS.md §3)."""
        try:
            self.nowait.wait()
        finally:
            self.nowait.shutdown()
            self.is_shut = True
            self.manager.shutdown()


class _Process:
    """Where the process keeps its runtime: the live one, and the one shut down last."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: Runtime | None = None
        self.shut: Runtime | None = None


_process = _Process()


def current() -> Runtime:
    """The live Runtime, started (from the environment) on first use."""
    rt = _process.live
    if rt is not None:
        return rt
    with _process.lock:
        if _process.live is None:
            _process.live = Runtime(_config.read())
            _process.shut = None
        return _process.live


def torn_down() -> bool:
    """True after shutdown() until something starts a new runtime."""
    return _process.live is None and _process.shut is not None


def shutdown() -> None:
    """Tear the runtime down: finish nowait work, drain queues, free device memory,
    unpin, release contexts. Unlock and free after this are quiet no-ops; any other
    call starts a new runtime."""
    with _process.lock:
        rt, _process.live = _process.live, None
        if rt is not None:
            _process.shut = rt
    if rt is not None:
        rt.shutdown()


def _after_fork_in_child() -> None:
    """The child starts empty: pins, contexts and worker threads are not inherited."""
    rt = _process.live
    _process.lock = threading.Lock()
    _process.live = None
    _process.shut = None
    if rt is not None:
        rt.manager.forget()


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
