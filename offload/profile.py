"""LIBOMPTARGET_PROFILE=file.json: a Chrome trace of the runtime's copies and kernels.

LLVM 19's part, in its names and form: `HostToDev`, `DevToHost` and `Kernel Target`
events on the calling thread, each with LLVM's `detail` (the source location, then
`Size=...B` or the launch's numbers), kept when they last at least
LIBOMPTARGET_PROFILE_GRANULARITY microseconds (default 500, as LLVM), and one
`Total <name>` event per name whatever the granularity. Beyond it, every copy and
kernel also on a lane of its device queue, with its bytes, route (pinned, staged,
pageable, host, peer), kernel name and source (Python `file:line`, or a C program's
`ident_t`), timed to its completion: a queued operation is waited for while profiling.

With no profile each hook costs one global lookup."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from .routes import by_route

#: the profile being written, or None
active: Profile | None = None

_HERE = os.path.dirname(os.path.abspath(__file__))
_DEVICE_LANES = 1 << 20          # lane tids start here (OS thread ids are below)


class Profile:
    """The events of one process, written to `path` by `write()`."""

    def __init__(self, path: str, granularity_us: int):
        self.path = path
        self.pid = os.getpid()
        self.granularity_us = granularity_us
        self._t0 = time.perf_counter_ns()
        self._epoch_us = time.time_ns() // 1000
        self._lock = threading.Lock()
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

    def _record(self, name: str, detail: str, start: int, end: int,
                where: tuple[str, int, Any], args: dict[str, Any]) -> None:
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

    def _timed(self, work: Callable[[], Any], sync: Callable[[], None] | None
               ) -> tuple[Any, int, int] | None:
        """(result, start, end) of `work`, waited for with `sync`; None when this thread
        is already inside a recorded operation (that one records it)."""
        tls = self._tls
        if getattr(tls, "busy", False):
            return None
        tls.busy = True
        try:
            start = time.perf_counter_ns()
            result = work()
            if sync is not None:
                sync()
            return result, start, time.perf_counter_ns()
        finally:
            tls.busy = False

    def copy(self, dev: Any, plugin: str, device: int, to_device: bool | None, size: int,
             queue: Any, work: Callable[[], Any]) -> Any:
        """Run the copy `work` (to_device None: to another device) and record it, its
        route read from the device's counters (a copy inside another is the outer's)."""
        prefix, where = self._source()
        before = dict(dev.stats)
        timed = self._timed(work, None if queue is None else lambda: dev._sync_impl(queue))
        if timed is None:
            return work()
        result, start, end = timed
        delta = {k: v - before[k] for k, v in dev.stats.items()}
        if to_device is None:
            name, routes = "DevToDev", {"peer": delta["peer"]}
        else:
            name = "HostToDev" if to_device else "DevToHost"
            routes = by_route(delta, "to" if to_device else "from", dev.host_memory)
        moved = {r: n for r, n in routes.items() if n}
        route = max(moved, key=lambda r: moved[r]) if moved else "none"
        self._record(name, f"{prefix}Size={size}B", start, end, (plugin, device, queue),
                     {"bytes": size, "route": route, "routes": moved, "device": device,
                      "plugin": plugin, "source": where})
        return result

    def kernel(self, plugin: str, device: int, name: str, nargs: int, teams: int | None,
               threads: int | None, queue: Any, sync: Callable[[], None],
               work: Callable[[], Any], tripcount: int = 0) -> Any:
        """Run the launch `work` and record it, timed to the kernel's end."""
        prefix, where = self._source()
        timed = self._timed(work, None if queue is None else sync)
        if timed is None:
            return work()
        result, start, end = timed
        self._record("Kernel Target",
                     f"{prefix}NumArguments={nargs};NumTeams={teams or 0};"
                     f"TripCount={tripcount}",
                     start, end, (plugin, device, queue),
                     {"kernel": name, "teams": teams, "threads": threads, "device": device,
                      "plugin": plugin, "source": where})
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
            json.dump(data, f)
        os.replace(tmp, self.path)


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
