"""The one per-process state: a Runtime owns the PluginManager, the default device,
the nowait pool, and the exit and fork hooks."""
from __future__ import annotations

import atexit
import collections
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from . import _accel, locks, profile
from . import config as _config
from ._lazy import numpy as np
from .config import Config, TargetOffload
from .device import Device
from .errors import ErrorCode, OffloadError
from .interrupts import (  # noqa: F401 - tests and the accelerator reach them here
    _deferring_sigint,
    _deliver_sigint,
    _install_sigint_deferral,
    _Sigint,
    defers_interrupts,
    interrupt_waits,
    keep_interrupt,
)
from .interrupts import inside as _tls
from .nowait import (
    NowaitPool,
)
from .plugin_manager import PluginManager
from .plugins.common import Interrupts

omp_initial_device = -1
"""OpenMP 5.2's device number of the initial device (the host), accepted wherever a device
number is."""
omp_invalid_device = -2
"""OpenMP 5.2's invalid device number: where a construct is given it, offloading fails."""



class Runtime:
    """The runtime of this process: plugins and devices, the default device, nowait work."""

    def __init__(self, config: Config):
        self.config = config
        if config.profile:                  # before any device: their tables trace
            profile.start(config.profile, config.profile_granularity)
        self.manager = PluginManager(config)
        self._icv = threading.local()         # default-device-var, per thread as in libomp
        self.nowait = NowaitPool(self)
        self.is_shut = False
        self.closing = False             # shutdown has begun: new operations are refused
        # operations in flight: one item each (deque append/pop are atomic, no lock)
        self._inflight: collections.deque = collections.deque()
        self._count = self.manager.num_devices()        # fixed once plugins are loaded
        self._made = self.manager.devices_made           # number -> Device, once made
        self._mandatory = config.target_offload is TargetOffload.MANDATORY

    def run_as_operation(self, fn: Callable[..., Any], args: tuple) -> Any:
        """Run fn(*args) on a nowait worker as an operation of this runtime (begun when
        the work was submitted)."""
        _tls.rt = self
        try:
            return fn(*args)
        finally:
            _tls.rt = None
            self.end()

    @property
    def default_device(self) -> int:
        """The calling thread's default device (OpenMP's default-device-var): what
        omp_set_default_device set on this thread, else OMP_DEFAULT_DEVICE (0). Under
        OMP_TARGET_OFFLOAD=disabled the initial device, whatever was set (LLVM's
        api/omp_get_default_device_test.c, omp_set_default_device_disabled.c)."""
        if self.config.target_offload is TargetOffload.DISABLED:
            return self._count
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
        count = self._count
        if type(n) is int and 0 <= n < count:          # the common case, quickly
            return m.get_device(n)
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
        if type(n) is int and 0 <= n < self._count:      # a device made already: at once
            dev = self._made.get(n)
            if dev is not None:
                return dev
        if self._mandatory and self._count == 0:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "failure of target construct while offloading is mandatory\n"
                               "  (OMP_TARGET_OFFLOAD=mandatory and no offload device is "
                               "available; offload-info says why)")
        return self.device(n)

    # ---- operations in flight (see `operation`) -----------------------------------
    def begin(self) -> None:
        """Count an operation in; UNINITIALIZED once shutdown has begun. (Counted before
        the check: shutdown sets `closing` first, then waits for the count.)"""
        self._inflight.append(1)
        if self.closing:
            self._inflight.pop()
            raise _unavailable("is shutting down")

    def end(self) -> None:
        self._inflight.pop()

    def busy(self) -> int:
        """Operations in flight."""
        return len(self._inflight)

    def wait_idle(self, timeout: float, own: int = 0) -> bool:
        """Wait until only `own` operations (the caller's) are in flight."""
        deadline = time.monotonic() + timeout
        while len(self._inflight) > own:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def shutdown(self) -> None:
        """Tear every plugin down (docs/semantics.md, "Devices and plugins"); nowait work
        has finished. The shutdown hooks run first, while the devices are still there."""
        try:
            self.nowait.wait(errors=False)
        finally:
            self.nowait.shutdown()
            for hook in list(_SHUTDOWN_HOOKS):
                try:
                    hook(self)
                except Exception as exc:      # noqa: BLE001 - said, and the teardown goes on
                    print(f"offload: at shutdown, {hook.__qualname__} failed: "
                          f"{type(exc).__name__}: {exc}", file=sys.stderr)
            self.is_shut = True
            self.manager.shutdown()
            profile.stop()


class _Process:
    """Where the process keeps its runtime: the live one (possibly closing), the one shut
    down last, and whether the interpreter is exiting."""

    def __init__(self) -> None:
        self.lock = locks.new_lock()
        self.live: Runtime | None = None
        self.shut: Runtime | None = None
        self.exiting = False


_process = _Process()
Interrupts.hook = _deliver_sigint           # long driver waits poll this

SHUTDOWN_WAIT_S = 10.0            # how long shutdown waits for operations in flight


def _unavailable(why: str) -> OffloadError:
    return OffloadError(ErrorCode.UNINITIALIZED, f"the offload runtime {why}")


def start(config: Config) -> Runtime:
    """Start the process's runtime with `config` unless one is live; return the live one
    (the C API starts it with the policy libomp applies to constructs left out)."""
    with _process.lock:
        if _process.live is None and not _process.exiting:
            _process.live = Runtime(config)
            _process.shut = None
            _install_sigint_deferral()
    return current()


def current() -> Runtime:
    """The runtime of the operation this thread is in, else the live one, started (from
    the environment) on first use. UNINITIALIZED while one is shutting down, and after
    the interpreter started exiting."""
    rt = getattr(_tls, "rt", None)
    if rt is not None:
        return rt
    rt = _process.live
    if rt is not None and not rt.closing:
        return rt
    with _process.lock:
        if _process.exiting:
            raise _unavailable("was shut down: the interpreter is exiting")
        rt = _process.live
        if rt is None:
            rt = _process.live = Runtime(_config.read())
            _process.shut = None
            _install_sigint_deferral()
        elif rt.closing:
            raise _unavailable("is shutting down")
        return rt


F = TypeVar("F", bound=Callable[..., Any])


def operation(fn: F) -> F:
    """Count a public call as an operation in flight: shutdown waits for it, and refuses
    new ones (UNINITIALIZED) while it runs. In C (the accelerator's Operation, the same
    steps) where it builds and OFFLOAD_ACCEL is not 0."""
    return _operation(fn, current)


def release_operation(fn: F) -> F:
    """`operation` for a call that gives something back (a free, an unlock, a context
    manager's exit): it never starts a runtime; with none live, or one shutting down, it
    runs as a plain call (its own checks make it the quiet no-op of after teardown). A
    Ctrl-C that arrives as it starts waits for its end, so a KeyboardInterrupt out of it
    means the thing was given back."""
    return _operation(fn, _live)


def _live() -> Runtime | None:
    rt = _process.live
    return None if rt is None or rt.closing else rt


def _operation(fn: F, start: Callable[[], Runtime | None]) -> F:
    module = _accel.load() if _config.accel_enabled() else None
    if module is not None:
        return functools.update_wrapper(  # type: ignore[return-value]
            module.Operation(fn, _tls, _process, start, _unavailable, _Sigint,
                             _deliver_sigint), fn)
    return _operation_py(fn, start)


def resource_operation(undo: Callable[..., Any]) -> Callable[[F], F]:
    """`operation` for a call that hands back a resource (a pin, an entered data region,
    an allocation, a queue): a Ctrl-C delivered as it returns, its work done, gives the
    resource back (`undo(what it returned, *its arguments)`) before the KeyboardInterrupt
    propagates, so the runtime never holds
    what no caller got (with locked(a): pinned, and no __exit__ to unpin)."""
    def wrap(fn: F) -> F:
        got = threading.local()

        def recording(*args: Any, **kwargs: Any) -> Any:
            r = fn(*args, **kwargs)
            got.result, got.done = r, True
            return r
        op = operation(functools.update_wrapper(recording, fn))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            got.done = False
            try:
                return op(*args, **kwargs)
            except KeyboardInterrupt:
                if getattr(got, "done", False):
                    r, got.result, got.done = got.result, None, False
                    undo(r, *args, **kwargs)
                raise
            finally:
                got.result, got.done = None, False   # keeps nothing alive after the call
        return wrapper  # type: ignore[return-value]
    return wrap


def _operation_py(fn: F, start: Callable[[], Runtime | None]) -> F:
    """`operation` in Python; `start()` gives the runtime when none is live (or None: a
    plain call)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tls = _tls
        if getattr(tls, "rt", None) is not None:
            return fn(*args, **kwargs)                 # nested in an operation already
        rt = _process.live
        if rt is None or rt.closing:
            rt = start()
            if rt is None:
                return fn(*args, **kwargs)             # none live: a plain call
        inflight = rt._inflight
        tls.rt = rt                    # first: from here a Ctrl-C waits for the end
        try:
            inflight.append(1)                         # rt.begin(), inlined
            try:
                if rt.closing:
                    raise _unavailable("is shutting down")
                return fn(*args, **kwargs)
            finally:
                inflight.pop()
        finally:
            tls.rt = None
            if _Sigint.pending:
                _deliver_sigint()          # Ctrl-C during the operation: now it is done
    return wrapper  # type: ignore[return-value]


# the pure-Python wrapper's own steps (before and after the count) keep a Ctrl-C too
defers_interrupts(next(c for c in _operation_py.__code__.co_consts
                       if getattr(c, "co_name", None) == "wrapper"))


def torn_down() -> bool:
    """True while a runtime shuts down, and after until something starts a new one."""
    live = _process.live
    if live is not None:
        return live.closing
    return _process.shut is not None or _process.exiting


def shutdown(timeout: float | None = None) -> None:
    """Tear the runtime down: refuse new operations, wait (up to `timeout` seconds, default
    SHUTDOWN_WAIT_S) for those in flight and for nowait work, then drain queues, free
    device memory, unpin, release contexts. Unlock and free after this are quiet no-ops;
    any other call starts a new runtime. Operations still running after the wait keep
    their memory: the teardown is skipped and the process's exit releases it. Refused
    (INVALID_VALUE) from one of offload's nowait workers: it would wait for itself."""
    if threading.current_thread().name.startswith("offload-"):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"shutdown() from offload's own thread "
                           f"({threading.current_thread().name}: a host task, a nowait "
                           f"region's or a queue's host function) would wait for itself to "
                           f"finish; call it from the thread that started the work, after "
                           f"waiting for it")
    with _process.lock:
        rt = _process.live
        if rt is None or rt.closing:
            return
        rt.closing = True
    inside = getattr(_tls, "rt", None) is rt
    try:
        idle = rt.wait_idle(SHUTDOWN_WAIT_S if timeout is None else timeout,
                            own=1 if inside else 0)
        if idle:
            rt.shutdown()
        else:
            print(f"offload: {rt.busy()} operation(s) still running at shutdown; their "
                  f"memory is left for the process's exit", file=sys.stderr)
            rt.is_shut = True
    finally:
        with _process.lock:
            _process.live = None
            _process.shut = rt


def _at_exit() -> None:
    _process.exiting = True          # daemon threads still in offload get UNINITIALIZED
    shutdown()


def _after_fork_in_child() -> None:
    """The child starts empty: pins, contexts, worker threads and every lock offload
    holds are not inherited (another thread may have held them at the fork)."""
    rt = _process.live
    locks.forget_deferred()
    _process.lock = locks.new_lock()
    _process.live = None
    _process.shut = None
    _tls.__dict__.clear()
    profile.forget()
    if rt is not None:
        rt.manager.forget()
    for hook in list(_FORK_HOOKS):
        hook()


_FORK_HOOKS: list[Callable[[], None]] = []
_SHUTDOWN_HOOKS: list[Callable[[Runtime], None]] = []


def at_shutdown(hook: Callable[[Runtime], None]) -> None:
    """Run `hook(runtime)` when a runtime shuts down, before its devices go (modules above
    this one report what the runtime did this way)."""
    _SHUTDOWN_HOOKS.append(hook)


def imports_in_flight() -> bool:
    """Whether a thread other than this one is importing a module (holds importlib's lock
    of it). A fork then would leave that lock held for ever in the child, whose import of
    the module hangs: the fork waits (the library's fork handler, for a C program, checks
    again once no import can begin)."""
    module_locks = getattr(sys.modules.get("_frozen_importlib"), "_module_locks", None)
    if not isinstance(module_locks, dict):
        return False
    me = threading.get_ident()
    for ref in list(module_locks.values()):
        lock = ref() if callable(ref) else ref
        owner = getattr(lock, "owner", None)
        if owner is not None and owner != me:
            return True
    return False


def _before_fork() -> None:
    deadline = time.monotonic() + 10.0      # an import stuck that long: fork as asked
    while imports_in_flight() and time.monotonic() < deadline:
        time.sleep(0.001)


def at_fork_in_child(hook: Callable[[], None]) -> None:
    """Run `hook` in a forked child (modules reset their own locks this way)."""
    _FORK_HOOKS.append(hook)


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)

