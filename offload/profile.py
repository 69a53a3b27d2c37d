"""LIBOMPTARGET_PROFILE=file.json: a Chrome trace of the runtime's copies and kernels.

LLVM 19's part, in its names and form: `HostToDev`, `DevToHost` and `Kernel Target`
events on the calling thread, each with LLVM's `detail` (the source location, then
`Size=...B` or the launch's numbers), kept when they last at least
LIBOMPTARGET_PROFILE_GRANULARITY microseconds (default 500, as LLVM), and one
`Total <name>` event per name whatever the granularity. Beyond it, every copy and
kernel also on a lane of its device queue, with its bytes, route (pinned, staged,
pageable, host, peer), map clause, kernel name and source (Python `file:line`, or a C
program's `ident_t`), timed to its completion: by timing events on its queue where the
device has them (DeviceClock), else by the host's clock; a queued operation is waited
for while profiling.

With no profile each hook costs one global lookup."""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from . import locks
from .routes import by_route

#: the profile being written, or None
active: Profile | None = None

_HERE = os.path.dirname(os.path.abspath(__file__))
_DEVICE_LANES = 1 << 20          # lane tids start here (OS thread ids are below)
_REANCHOR_NS = 4_000_000_000     # a device clock's anchor moves on after 4 s


class Profile:
    """The events of one process, written to `path` by `write()`."""

    def __init__(self, path: str, granularity_us: int):
        self.path = path
        self.pid = os.getpid()
        self.granularity_us = granularity_us
        self._t0 = time.perf_counter_ns()
        self._epoch_us = time.time_ns() // 1000
        self._lock = locks.new_lock()
        self._events: list[dict[str, Any]] = []
        self._totals: dict[str, list[int]] = {}      # name -> [count, total ns]
        self._lanes: dict[tuple[str, int, int], int] = {}
        self._queues: dict[tuple[str, int], dict[int, int]] = {}
        self._tls = threading.local()

    # ---- where the work came from ---------------------------------------------------
    def set_c_source(self, psource: str | None) -> None:
        """A C export's `ident_t` location (";file;func;line;col;;") for what follows
        on this thread; None when the export is done."""
        self._tls.c_source = psource

    def _source(self) -> tuple[str, str]:
        """(LLVM's detail prefix, a readable location) of the calling thread's work."""
        c = getattr(self._tls, "c_source", None)
        if c is not None:
            parts = c.split(";")
            where = f"{parts[1]}:{parts[3]}" if len(parts) > 3 and parts[1] != "unknown" \
                else "unknown"
            return c, where
        f: FrameType | None = sys._getframe(2)
        while f is not None and f.f_code.co_filename.startswith(_HERE):
            f = f.f_back
        if f is None:
            return ";unknown;unknown;0;0;;", "unknown"
        code = f.f_code
        return (f";{code.co_filename};{code.co_name};{f.f_lineno};0;;",
                f"{os.path.basename(code.co_filename)}:{f.f_lineno}")

    # ---- events ---------------------------------------------------------------------
    def _us(self, ns: int) -> float:
        return (ns - self._t0) / 1000.0

    def _lane(self, plugin: str, device: int, queue: Any) -> int:
        qs = self._queues.setdefault((plugin, device), {})
        q = qs.setdefault(id(queue) if queue is not None else 0, len(qs))
        key = (plugin, device, q)
        tid = self._lanes.get(key)
        if tid is None:
            tid = self._lanes[key] = _DEVICE_LANES + len(self._lanes)
        return tid

    def _record(self, name: str, detail: str, span: _Span, where: tuple[str, int, Any],
                args: dict[str, Any]) -> None:
        start, end = span.start, span.end
        dur = (end - start) / 1000.0
        with self._lock:
            lane = self._lane(*where)
            total = self._totals.setdefault(name, [0, 0])
            total[0] += 1
            total[1] += end - start
            common = {"pid": os.getpid(), "ts": self._us(start), "dur": dur, "ph": "X",
                      "name": name}
            if dur >= self.granularity_us:
                self._events.append({**common, "tid": threading.get_native_id(),
                                     "args": {"detail": detail}})
            self._events.append({**common, "tid": lane, "cat": "device", "args": args})

    def _timed(self, dev: Any, queue: Any, work: Callable[[Any], Any], device_clock: bool
               ) -> tuple[Any, _Span, bool]:
        """Run `work(q)` waited to completion: (its result, its span, whether it is this
        thread's outermost recorded operation). On a device with a clock (and
        `device_clock`) `q` is `queue` or, for synchronous work, a queue of the device's
        own, and the span is the device's, between two timing events around the work;
        else the host's wall time. An operation inside another gives its device span to
        the outer one (a C program's kernel, launched by the plugin)."""
        tls = self._tls
        outer = not getattr(tls, "busy", False)
        if not outer and not tls.want_inner:
            return work(queue), _NO_SPAN, False
        clock = dev.profile_clock() if device_clock else None
        if outer:
            tls.busy, tls.inner, tls.want_inner = True, None, clock is None
        try:
            if clock is None:
                start = time.perf_counter_ns()
                result = work(queue)
                if queue is not None:
                    dev._sync_impl(queue)
                span = _Span(start, time.perf_counter_ns(), "host")
            else:
                with dev.queue(queue) as q:
                    a = clock.mark(q)
                    try:
                        result = work(q)
                        b = clock.mark(q)
                    except BaseException:
                        clock.forget(a)
                        raise
                    dev._sync_impl(q)
                span = clock.span(a, b)
            if not outer:
                inner = tls.inner
                tls.inner = span if inner is None else inner.join(span)
            elif clock is None and tls.inner is not None:
                span = tls.inner
            return result, span, outer
        finally:
            if outer:
                tls.busy = False

    def clause(self, text: str | None) -> None:
        """The map clause (or motion) behind the copies that follow on this thread, named
        in their events; None when that clause's copies are done."""
        self._tls.clause = text

    def copy(self, dev: Any, plugin: str, device: int, to_device: bool | None, size: int,
             queue: Any, work: Callable[[Any], Any]) -> Any:
        """Run the copy `work(q)` (to_device None: to another device) and record it, its
        route read from the device's counters (a copy inside another is the outer's)."""
        prefix, where = self._source()
        before = dict(dev.stats)
        result, span, outer = self._timed(dev, queue, work, True)
        if not outer:
            return result
        delta = {k: v - before[k] for k, v in dev.stats.items()}
        if to_device is None:
            name, routes = "DevToDev", {"peer": delta["peer"]}
        else:
            name = "HostToDev" if to_device else "DevToHost"
            routes = by_route(delta, "to" if to_device else "from", dev.host_memory)
        moved = {r: n for r, n in routes.items() if n}
        route = max(moved, key=lambda r: moved[r]) if moved else "none"
        args = {"bytes": size, "route": route, "routes": moved, "device": device,
                "plugin": plugin, "source": where, "clock": span.clock}
        clause = getattr(self._tls, "clause", None)
        if clause is not None:
            args["clause"] = clause
        self._record(name, f"{prefix}Size={size}B", span, (plugin, device, queue), args)
        return result

    def kernel(self, dev: Any, plugin: str, device: int, name: str, nargs: int,
               teams: int | None, threads: int | None, queue: Any,
               work: Callable[[Any], Any], tripcount: int = 0,
               device_clock: bool = True) -> Any:
        """Run the launch `work(q)` and record it, timed to the kernel's end (by the
        kernel launched inside it when `device_clock` is False)."""
        prefix, where = self._source()
        result, span, outer = self._timed(dev, queue, work, device_clock)
        if not outer:
            return result
        self._record("Kernel Target",
                     f"{prefix}NumArguments={nargs};NumTeams={teams or 0};"
                     f"TripCount={tripcount}",
                     span, (plugin, device, queue),
                     {"kernel": name, "teams": teams, "threads": threads, "device": device,
                      "plugin": plugin, "source": where, "clock": span.clock})
        return result

    # ---- the file -------------------------------------------------------------------
    def trace(self) -> dict[str, Any]:
        """The trace as Chrome trace-event JSON data."""
        pid = os.getpid()
        with self._lock:
            events = list(self._events)
            totals = sorted(self._totals.items(), key=lambda kv: -kv[1][1])
            lanes = dict(self._lanes)
        tid = threading.get_native_id()
        for i, (name, (count, ns)) in enumerate(totals):
            events.append({"pid": pid, "tid": tid + 1 + i, "ph": "X", "ts": 0,
                           "dur": ns / 1000.0, "name": f"Total {name}",
                           "args": {"count": count, "avg ms": ns / count / 1e6}})
        meta = [{"cat": "", "pid": pid, "tid": tid, "ts": 0, "ph": "M",
                 "name": "process_name", "args": {"name": "libomptarget"}},
                {"cat": "", "pid": pid, "tid": tid, "ts": 0, "ph": "M",
                 "name": "thread_name", "args": {"name": _program()}}]
        for (plugin, device, q), lane in lanes.items():
            meta.append({"cat": "", "pid": pid, "tid": lane, "ts": 0, "ph": "M",
                         "name": "thread_name",
                         "args": {"name": f"{plugin} device {device} queue {q}"}})
        return {"traceEvents": events + meta, "beginningOfTime": self._epoch_us}

    def write(self) -> None:
        """Write everything recorded so far to the file (again at each call)."""
        data = self.trace()
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            import json  # (not at a C program's start)
            json.dump(data, f)
        os.replace(tmp, self.path)


class _Span:
    """When an operation ran, in perf_counter nanoseconds, and by which clock."""

    __slots__ = ("clock", "end", "start")

    def __init__(self, start: int, end: int, clock: str):
        self.start, self.end, self.clock = start, end, clock

    def join(self, other: _Span) -> _Span:
        return _Span(min(self.start, other.start), max(self.end, other.end), self.clock)


_NO_SPAN = _Span(0, 0, "host")


class DeviceClock:
    """A device's timing events placed on the host's clock: one anchor event, recorded
    and waited for when the clock is made, is taken to complete at that host time."""

    def __init__(self, dev: Any, first: Any):
        self._dev = dev
        self._anchor = first
        with dev.queue() as q:
            dev._event_record_impl(first, q)
            dev._event_sync_impl(first)
        self._anchor_ns = time.perf_counter_ns()

    @staticmethod
    def of(dev: Any) -> DeviceClock | None:
        """The clock of `dev`, or None where its plugin has no timing events."""
        first = dev._timing_event_impl()
        return None if first is None else DeviceClock(dev, first)

    def mark(self, queue: Any) -> Any:
        """A timing event recorded on `queue` now."""
        dev = self._dev
        ev = dev._timing_event_impl()
        try:
            dev._event_record_impl(ev, queue)
        except BaseException:
            dev._event_destroy_impl(ev)
            raise
        return ev

    def forget(self, ev: Any) -> None:
        self._dev._event_destroy_impl(ev)

    def span(self, a: Any, b: Any) -> _Span:
        """The device time from event `a` to `b` (recorded in this order on one queue),
        on the host's clock, once `b` is complete; both events are used up."""
        dev = self._dev
        try:
            dev._event_sync_impl(b)            # an event is not its queue's last work
            start = self._anchor_ns + dev._event_elapsed_ns_impl(self._anchor, a)
            end = start + dev._event_elapsed_ns_impl(a, b)
        finally:
            dev._event_destroy_impl(a)
        if end - self._anchor_ns > _REANCHOR_NS:   # a float's milliseconds lose the
            dev._event_destroy_impl(self._anchor)  # microseconds: start from b
            self._anchor, self._anchor_ns = b, end
        else:
            dev._event_destroy_impl(b)
        return _Span(start, end, "device")


def _program() -> str:
    """The program's name (a C program's, not the library's interpreter's)."""
    try:
        with open("/proc/self/comm") as f:
            return f.read().strip()
    except OSError:
        return os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python")


_last: Profile | None = None          # the one stopped last (a later start continues it)
_forked = False                       # this process is a forked child


def forget() -> None:
    """In a forked child: the parent's profile is the parent's; the child's own, if it
    offloads, goes to PATH.<pid>."""
    global active, _last, _forked
    active = _last = None
    _forked = True


def start(path: str, granularity_us: int) -> Profile:
    """Begin profiling into `path` unless a profile is being written. A runtime started
    after another's shutdown in the same process, with the same path, continues that
    file's profile (one file per process)."""
    global active, _last
    if active is None:
        if _forked:
            path = f"{path}.{os.getpid()}"
        last = _last
        if last is not None and last.path == path and last.pid == os.getpid():
            last.granularity_us = granularity_us
            active = last
        else:
            active = Profile(path, granularity_us)
        _last = active
    return active


def stop() -> None:
    """Write the profile, if any, and stop profiling (a runtime's shutdown)."""
    global active
    p, active = active, None
    if p is not None:
        p.write()


def flush() -> None:
    """Write the profile, if any, and go on (a C program's end)."""
    p = active
    if p is not None:
        p.write()
