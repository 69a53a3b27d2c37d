"""The plugin contract, as checks any plugin package can run in its own CI.

`run_conformance(MyPlugin)` builds the plugin from a Config, and checks each hook of the
plugin table (docs/plugins.md) against the rule the common layer relies on: device
discovery and initialisation, allocation, copies of every size class pinned and unpinned
(with and without a queue), copies split at pinned boundaries, the first-pin/last-unpin
flags and reference counts of locks, queue ordering and completion, device-to-device
exchange, error mapping (every failure an OffloadError with an ErrorCode), device info,
an optional kernel, a short multi-thread run, and teardown. A failure raises
ConformanceError naming the hook and the rule.

    from offload.testing import run_conformance
    def test_conformance():
        run_conformance(MyPlugin)
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..errors import ErrorCode, OffloadError
from ..image import Image
from ..plugins.common import AllocKind, GenericPlugin

__all__ = ["ConformanceError", "Report", "run_conformance"]

PAGE = 4096


class ConformanceError(AssertionError):
    """A plugin broke a rule of the plugin contract; the message names hook and rule."""

    def __init__(self, hook: str, rule: str, detail: str = ""):
        self.hook, self.rule = hook, rule
        super().__init__(f"{hook}: {rule}" + (f" ({detail})" if detail else ""))


@dataclass
class Report:
    """What ran: the checks passed, and those skipped with the reason."""

    plugin: str
    devices: int
    passed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{self.plugin}: {len(self.passed)} checks passed on {self.devices} "
                 f"device(s)"]
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


def _check(ok: bool, hook: str, rule: str, detail: str = "") -> None:
    if not ok:
        raise ConformanceError(hook, rule, detail)


def _expect_error(fn: Callable[[], Any], code: ErrorCode | None, hook: str, rule: str) -> None:
    try:
        fn()
    except OffloadError as exc:
        _check(code is None or exc.code is code, hook, rule,
               f"raised {exc.code.name}, expected {code.name if code else 'an OffloadError'}")
        return
    except Exception as exc:                      # noqa: BLE001 - the rule is broken
        raise ConformanceError(hook, rule, f"raised {type(exc).__name__}: {exc}, not an "
                                           f"OffloadError") from exc
    raise ConformanceError(hook, rule, "returned without an error")


class _Buffer:
    """Page-aligned host memory of `size` bytes, with a pattern."""

    def __init__(self, size: int, seed: int):
        self._raw = ctypes.create_string_buffer(size + 2 * PAGE)
        base = ctypes.addressof(self._raw)
        self.addr = base + (-base) % PAGE
        self.size = size
        self.fill(seed)

    def fill(self, seed: int) -> None:
        pattern = bytes((seed + i * 7) % 251 for i in range(min(self.size, 4096)))
        full = (pattern * (self.size // max(len(pattern), 1) + 1))[:self.size]
        ctypes.memmove(self.addr, full, self.size)

    def read(self) -> bytes:
        return ctypes.string_at(self.addr, self.size)


def _spy(plugin: GenericPlugin, calls: list[tuple]) -> None:
    """Record the flags the common layer passes to the pin hooks (on this instance)."""
    lock, unlock = plugin._lock_impl, plugin._unlock_impl

    def lock_spy(device: int, host: int, size: int, first: bool, read_only: bool) -> int:
        calls.append(("lock", device, host, first))
        return lock(device, host, size, first, read_only)

    def unlock_spy(device: int, host: int, size: int, last: bool) -> None:
        calls.append(("unlock", device, host, last))
        unlock(device, host, size, last)

    plugin._lock_impl = lock_spy          # type: ignore[method-assign]
    plugin._unlock_impl = unlock_spy      # type: ignore[method-assign]


def run_conformance(plugin_class: type[GenericPlugin], config: Config | None = None, *,
                    image: Image | None = None, kernel: str = "add_one",
                    threads: int = 8, sizes: Sequence[int] | None = None) -> Report:
    """Check `plugin_class` against the plugin contract; raise ConformanceError naming the
    hook and the rule at the first failure; return a Report of what ran.

    Args:
        plugin_class: a GenericPlugin subclass (what the `offload.plugins` entry point names).
        config: the Config to build it with (default: Config()).
        image: optionally, an Image holding a kernel for this plugin's devices with the C
            signature `void add_one(int *a, long lo, long hi)` (a[i] += 1 for lo <= i < hi),
            to check kernel loading and launch.
        kernel: that kernel's name.
        threads: threads for the multi-thread check (0 skips it).
        sizes: copy sizes to check (default: 1 B, 4 KiB, 1 MiB + 3 and 9 MiB + 5, the last
            above the staging threshold of every built-in plugin).
    """
    plugin = plugin_class(config or Config())
    n = plugin.number_of_devices()
    report = Report(plugin.name, n)
    if n == 0:
        raise ConformanceError("number_of_devices", "a plugin under test has a device",
                               plugin.reason or "no reason given")
    _check(isinstance(plugin.reason, str), "number_of_devices",
           "`reason` is a string (offload-info prints it)")
    calls: list[tuple] = []
    _spy(plugin, calls)
    try:
        checks: list[tuple[str, Callable[[], None]]] = [
            ("devices", lambda: _devices(plugin, n)),
            ("allocation", lambda: _allocation(plugin)),
            ("copies", lambda: _copies(plugin, sizes or (1, 4096, (1 << 20) + 3,
                                                         (9 << 20) + 5))),
            ("locks", lambda: _locks(plugin, calls, n)),
            ("split copies", lambda: _split(plugin)),
            ("queues", lambda: _queues(plugin)),
            ("exchange", lambda: _exchange(plugin, n)),
            ("device info", lambda: _info(plugin, n)),
        ]
        if image is not None:
            checks.append(("kernel", lambda: _kernel(plugin, image, kernel)))
        else:
            report.skipped["kernel"] = "no image given"
        if threads:
            checks.append(("threads", lambda: _threads(plugin, threads)))
        for name, check in checks:
            try:
                check()
            except ConformanceError:
                raise
            except OffloadError as exc:
                raise ConformanceError(_hook_of(exc) or f"({name})",
                                       "an operation on valid input succeeds", str(exc)
                                       ) from exc
            except Exception as exc:
                raise ConformanceError(_hook_of(exc) or f"({name})",
                                       "every failure is an OffloadError with an ErrorCode",
                                       f"{type(exc).__name__}: {exc}, not an OffloadError"
                                       ) from exc
            report.passed.append(name)
    finally:
        plugin.deinit()
    _check(len(plugin.pinned) == 0, "deinit", "teardown empties the pinned registry")
    report.passed.append("teardown")
    return report


def _hook_of(exc: BaseException) -> str | None:
    """The innermost plugin hook (`_*_impl`) the exception came through."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        if name.startswith("_") and name.endswith("_impl"):
            found = name
        tb = tb.tb_next
    return found


# ---- the checks ----------------------------------------------------------------------
def _devices(plugin: GenericPlugin, n: int) -> None:
    for d in range(n):
        dev = plugin.init_device(d)
        _check(plugin.device(d) is dev, "init_device", "one device object per device number")
        _check(dev.id == d, "init_device", "the device knows its plugin-local number")
    _expect_error(lambda: plugin.init_device(n), ErrorCode.INVALID_VALUE, "init_device",
                  "a device number past the last is INVALID_VALUE")


def _allocation(plugin: GenericPlugin) -> None:
    made: list[tuple[int, int]] = []
    for size in (1, 4096, 1 << 20):
        addr = plugin.data_alloc(0, size, AllocKind.DEVICE)
        _check(isinstance(addr, int) and addr != 0, "_alloc_impl",
               "returns a non-zero integer address", repr(addr))
        made.append((addr, size))
    spans = sorted(made)
    for (a, n), (b, _) in zip(spans, spans[1:], strict=False):
        _check(a + n <= b, "_alloc_impl", "live allocations do not overlap")
    for addr, _ in made:
        plugin.data_delete(0, addr, AllocKind.DEVICE)
    _expect_error(lambda: plugin.data_delete(0, made[0][0], AllocKind.DEVICE),
                  ErrorCode.NOT_FOUND, "data_delete", "a second free is NOT_FOUND")
    _expect_error(lambda: plugin.data_alloc(0, 0, AllocKind.DEVICE), ErrorCode.INVALID_VALUE,
                  "data_alloc", "size 0 is INVALID_VALUE")


def _round_trip(plugin: GenericPlugin, size: int, seed: int, queue: Any, hook: str) -> None:
    src, back = _Buffer(size, seed), _Buffer(size, seed + 1)
    tgt = plugin.data_alloc(0, size, AllocKind.DEVICE)
    try:
        plugin.data_submit(0, tgt, src.addr, size, queue)
        plugin.data_retrieve(0, back.addr, tgt, size, queue)
        if queue is not None:
            plugin.synchronize(0, queue)
        _check(back.read() == src.read(), hook,
               f"a round trip of {size} bytes returns the bytes sent"
               f"{' (on a queue, after synchronize)' if queue is not None else ''}")
    finally:
        plugin.data_delete(0, tgt, AllocKind.DEVICE)


def _copies(plugin: GenericPlugin, sizes: Sequence[int]) -> None:
    dev = plugin.device(0)
    for i, size in enumerate(sizes):
        _round_trip(plugin, size, i, None, "_submit_impl/_retrieve_impl (unpinned)")
        q = dev.get_queue()
        try:
            _round_trip(plugin, size, i + 10, q, "_submit_impl/_retrieve_impl (queue)")
        finally:
            dev.release_queue(q)
        buf = _Buffer(size, i + 20)
        try:
            plugin.data_lock(0, buf.addr, size)
        except OffloadError as exc:
            if exc.code is ErrorCode.UNSUPPORTED:
                continue                      # a plugin that cannot pin
            raise
        try:
            tgt = plugin.data_alloc(0, size, AllocKind.DEVICE)
            back = _Buffer(size, i + 30)
            plugin.data_submit(0, tgt, buf.addr, size)
            plugin.data_retrieve(0, back.addr, tgt, size)
            plugin.data_delete(0, tgt, AllocKind.DEVICE)
            _check(back.read() == buf.read(), "_submit_impl/_retrieve_impl (pinned)",
                   f"a round trip of {size} pinned bytes returns the bytes sent")
        finally:
            plugin.data_unlock(0, buf.addr)


def _locks(plugin: GenericPlugin, calls: list[tuple], n: int) -> None:
    buf = _Buffer(4 * PAGE, 3)
    calls.clear()
    try:
        a1 = plugin.data_lock(0, buf.addr, buf.size)
    except OffloadError as exc:
        if exc.code is ErrorCode.UNSUPPORTED:
            return
        raise
    a2 = plugin.data_lock(0, buf.addr + 100, 50)
    _check(a2 == a1 + 100, "data_lock", "an interior lock returns the entry's address plus "
                                        "the offset", f"{a1:#x}, {a2:#x}")
    pins = [c for c in calls if c[0] == "lock"]
    _check(len(pins) == 1 and pins[0][3] is True, "_lock_impl",
           "called once, with first=True, for a range locked twice", repr(pins))
    if n > 1:
        plugin.data_lock(1, buf.addr, buf.size)
        pins = [c for c in calls if c[0] == "lock"]
        _check(len(pins) <= 2 and all(not c[3] for c in pins[1:]), "_lock_impl",
               "a second device's pin is first=False", repr(pins))
        plugin.data_unlock(1, buf.addr)
    _expect_error(lambda: plugin.data_lock(0, buf.addr - PAGE, 2 * PAGE),
                  ErrorCode.INVALID_ARGUMENT, "data_lock",
                  "a partial overlap is refused (INVALID_ARGUMENT)")
    plugin.data_unlock(0, buf.addr)
    _check(not [c for c in calls if c[0] == "unlock" and c[3]], "_unlock_impl",
           "not called with last=True while a reference remains")
    plugin.data_unlock(0, buf.addr + 8)
    ends = [c for c in calls if c[0] == "unlock"]
    _check(bool(ends) and ends[-1][3] is True, "_unlock_impl",
           "the last reference's unpin has last=True", repr(ends))
    _check(len(plugin.pinned) == 0, "data_unlock", "the entry goes with its last reference")
    _expect_error(lambda: plugin.data_unlock(0, buf.addr), ErrorCode.NOT_FOUND,
                  "data_unlock", "an unlock of memory not locked is NOT_FOUND")
    _expect_error(lambda: plugin.data_lock(0, buf.addr, 0), ErrorCode.INVALID_VALUE,
                  "data_lock", "size 0 is INVALID_VALUE")


def _split(plugin: GenericPlugin) -> None:
    size = 8 * PAGE
    buf, back = _Buffer(size, 5), _Buffer(size, 6)
    try:
        plugin.data_lock(0, buf.addr + 2 * PAGE, 3 * PAGE)
    except OffloadError as exc:
        if exc.code is ErrorCode.UNSUPPORTED:
            return
        raise
    dev = plugin.device(0)
    before = dict(dev.stats)
    tgt = plugin.data_alloc(0, size, AllocKind.DEVICE)
    try:
        plugin.data_submit(0, tgt, buf.addr, size)
        plugin.data_retrieve(0, back.addr, tgt, size)
        _check(back.read() == buf.read(), "_submit_impl/_retrieve_impl",
               "a copy half pinned, half not, arrives whole")
        moved = dev.stats["to pinned"] - before["to pinned"]
        _check(moved == 3 * PAGE, "data_submit",
               "the pinned piece goes by the pinned path and only it", f"{moved} bytes")
    finally:
        plugin.data_delete(0, tgt, AllocKind.DEVICE)
        plugin.data_unlock(0, buf.addr + 2 * PAGE)


def _queues(plugin: GenericPlugin) -> None:
    dev = plugin.device(0)
    q = dev.get_queue()
    try:
        size = 1 << 16
        first, second, back = _Buffer(size, 7), _Buffer(size, 8), _Buffer(size, 9)
        tgt = plugin.data_alloc(0, size, AllocKind.DEVICE)
        plugin.data_lock(0, back.addr, size) if _can_pin(plugin) else None
        try:
            plugin.data_submit(0, tgt, first.addr, size, q)
            plugin.data_submit(0, tgt, second.addr, size, q)      # in order: the last wins
            plugin.data_retrieve(0, back.addr, tgt, size, q)
            plugin.synchronize(0, q)
            _check(plugin.query_async(0, q) is True, "_query_impl",
                   "a synchronized queue reports complete")
            _check(back.read() == second.read(), "_sync_impl",
                   "work on one queue runs in order and is done after synchronize")
        finally:
            if _can_pin(plugin):
                plugin.data_unlock(0, back.addr)
            plugin.data_delete(0, tgt, AllocKind.DEVICE)
    finally:
        dev.release_queue(q)


def _can_pin(plugin: GenericPlugin) -> bool:
    probe = _Buffer(PAGE, 1)
    try:
        plugin.data_lock(0, probe.addr, PAGE)
    except OffloadError:
        return False
    plugin.data_unlock(0, probe.addr)
    return True


def _exchange(plugin: GenericPlugin, n: int) -> None:
    size = 1 << 16
    src, back = _Buffer(size, 11), _Buffer(size, 12)
    other = 1 if n > 1 else 0
    a = plugin.data_alloc(0, size, AllocKind.DEVICE)
    b = plugin.data_alloc(other, size, AllocKind.DEVICE)
    try:
        plugin.data_submit(0, a, src.addr, size)
        done = plugin.data_exchange(0, a, plugin, other, b, size)
        _check(isinstance(done, bool), "_exchange_impl", "returns True or False")
        if done:
            plugin.data_retrieve(other, back.addr, b, size)
            _check(back.read() == src.read(), "_exchange_impl",
                   "a device-to-device copy that returned True moved the bytes")
    finally:
        plugin.data_delete(0, a, AllocKind.DEVICE)
        plugin.data_delete(other, b, AllocKind.DEVICE)


def _info(plugin: GenericPlugin, n: int) -> None:
    for d in range(n):
        info = plugin.device_info(d)
        _check(isinstance(info, dict) and "name" in info, "_info_impl",
               "returns a dict with at least 'name' (offload-info prints it)", repr(info))


def _kernel(plugin: GenericPlugin, image: Image, name: str) -> None:
    binary = next((b for b in image.binaries if plugin.is_valid_binary(b, 0)), None)
    _check(binary is not None, "check_binary", "accepts the image given for its devices")
    assert binary is not None
    n = 1000
    buf = _Buffer(n * 4, 0)
    ctypes.memset(buf.addr, 0, n * 4)
    tgt = plugin.data_alloc(0, n * 4, AllocKind.DEVICE)
    try:
        plugin.data_submit(0, tgt, buf.addr, n * 4)
        plugin.launch_kernel(0, binary, name, [tgt, 0, n], teams=(n + 63) // 64, threads=64)
        plugin.data_retrieve(0, buf.addr, tgt, n * 4)
        values = (ctypes.c_int32 * n).from_address(buf.addr)
        _check(all(v == 1 for v in values), "_launch_impl",
               "a launch without a queue has finished when it returns, with its effect")
        _expect_error(lambda: plugin.launch_kernel(0, binary, name, [tgt, 0]),
                      ErrorCode.INVALID_ARGUMENT, "launch_kernel",
                      "the wrong number of arguments is INVALID_ARGUMENT")
        _expect_error(lambda: plugin.launch_kernel(0, binary, name + "_missing", []),
                      None, "_kernel_impl", "an unknown kernel is an OffloadError")
    finally:
        plugin.data_delete(0, tgt, AllocKind.DEVICE)


def _threads(plugin: GenericPlugin, count: int) -> None:
    errors: list[BaseException] = []
    can_pin = _can_pin(plugin)

    def work(i: int) -> None:
        try:
            for j in range(20):
                size = (i * 997 + j * 4099) % (256 << 10) + 1
                buf, back = _Buffer(size, i + j), _Buffer(size, 99)
                if can_pin and j % 3 == 0:
                    plugin.data_lock(i % plugin.number_of_devices(), buf.addr, size)
                d = i % plugin.number_of_devices()
                tgt = plugin.data_alloc(d, size, AllocKind.DEVICE)
                plugin.data_submit(d, tgt, buf.addr, size)
                plugin.data_retrieve(d, back.addr, tgt, size)
                plugin.data_delete(d, tgt, AllocKind.DEVICE)
                if can_pin and j % 3 == 0:
                    plugin.data_unlock(d, buf.addr)
                if back.read() != buf.read():
                    raise ConformanceError("data_submit/data_retrieve",
                                           "copies from many threads at once stay correct")
        except BaseException as exc:        # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    if errors:
        first = errors[0]
        if isinstance(first, ConformanceError):
            raise first
        raise ConformanceError("(many threads)", "every hook is safe from several threads",
                               f"{type(first).__name__}: {first}") from first
    _check(len(plugin.pinned) == 0, "data_unlock", "the registry is empty after the run")
