"""PinnedMap: a plugin's registry of pinned host ranges, counted per device.

Pure Python, no driver: the plugin passes a `PinDriver` whose methods do the
real pinning. Semantics are docs/semantics.md, "Pinned memory".
"""
from __future__ import annotations

import bisect
import enum
import threading
from typing import Any, Protocol

from . import locks
from .errors import ErrorCode, OffloadError


class Kind(enum.Enum):
    USER = "user"
    MAPPED = "mapped"
    EXTERNAL = "external"
    ALLOC_HOST = "alloc_host"


class PinDriver(Protocol):
    def pin(self, device: int, host: int, size: int, first: bool, read_only: bool) -> int:
        """Pin [host, host+size) for `device`; return its device-accessible address."""

    def unpin(self, device: int, host: int, size: int, last: bool) -> None:
        """Undo `pin` for `device`; `last` when no other device uses the entry."""

    def pin_is_read_only(self, host: int) -> bool:
        """Whether the pin just made at `host` only allows reading."""
        ...

    def query(self, host: int, size: int) -> tuple[int, int, int] | None:
        """(base, size, device address of base) if the driver reports the range pinned."""


class PinnedEntry:
    __slots__ = ("host", "size", "kind", "count", "dev", "floor", "ours", "owners", "pending",
                 "read_only")

    def __init__(self, host: int, size: int, kind: Kind, read_only: bool = False):
        self.host = host
        self.size = size
        self.kind = kind
        self.count: dict[int, int] = {}     # device -> references
        self.dev: dict[int, int] = {}       # device -> device-accessible address of host
        self.floor: dict[int, int] = {}     # references an allocation holds (alloc_host)
        self.ours: set[int] = set()         # devices for which we called driver.pin
        # (device, kind, object) kept alive by a reference that named it, let go by the
        # release of a reference of the same device and kind (map/unmap cycles do not
        # pile up, and memory is not kept alive after its last named reference goes)
        self.owners: list[tuple[int, Kind, Any]] = []
        self.pending: threading.Lock | None = None   # held while a driver call runs
        self.read_only = read_only

    @property
    def end(self) -> int:
        return self.host + self.size

    def contains(self, p: int, n: int) -> bool:
        return self.host <= p and p + n <= self.host + self.size

    def __repr__(self) -> str:
        return (f"PinnedEntry(0x{self.host:x}, {self.size}, {self.kind.value}, "
                f"count={self.count})")


class PinnedMap:
    """Non-overlapping pinned ranges, sorted by start: O(log n) lookups."""

    def __init__(self, lock: Any = None) -> None:
        """`lock`: the lock to guard the map with (threading.Lock's interface; default a
        new threading.Lock)."""
        self._lock = locks.new_lock() if lock is None else lock
        self._starts: list[int] = []
        self._entries: list[PinnedEntry] = []

    # ---- lookups (caller holds the lock) ---------------------------------
    def _overlapping(self, p: int, end: int) -> list[PinnedEntry]:
        starts, entries = self._starts, self._entries
        i = bisect.bisect_right(starts, p) - 1
        if i < 0 or entries[i].host + entries[i].size <= p:
            i += 1
        out = []
        while i < len(starts) and starts[i] < end:
            out.append(entries[i])
            i += 1
        return out

    def _insert(self, e: PinnedEntry) -> None:
        i = bisect.bisect_left(self._starts, e.host)
        self._starts.insert(i, e.host)
        self._entries.insert(i, e)

    def _remove(self, e: PinnedEntry) -> None:
        """Take `e` out of the map (a no-op when it is gone already: cleared at teardown)."""
        i = bisect.bisect_left(self._starts, e.host)
        entries = self._entries
        while i < len(entries) and entries[i] is not e:
            i += 1
        if i < len(entries):
            del self._starts[i]
            del entries[i]

    @staticmethod
    def _settle(e: PinnedEntry) -> None:
        held, e.pending = e.pending, None
        if held is not None:
            held.release()                    # whoever waits on it looks again

    @staticmethod
    def _pending() -> threading.Lock:
        """A marker for an entry whose driver call runs: a latch, held until `_settle`."""
        return locks.latch()  # type: ignore[no-any-return]

    # ---- the two operations every other one is built from -----------------
    def acquire(self, driver: PinDriver, p: int, n: int, device: int, *,
                kind: Kind = Kind.USER, owner: Any = None, read_only: bool = False,
                create: bool = True, partial_ok: bool = False) -> int | None:
        """Take one reference on [p, p+n) for `device`; return its device address.

        `create=False` returns None instead of pinning a new range;
        `partial_ok=True` returns None instead of failing on a partial overlap.
        """
        if n <= 0:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               f"cannot lock {n} bytes at 0x{p:x}: size must be positive")
        if p == 0:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, "cannot lock a NULL pointer")
        end = p + n
        while True:
            with self._lock:
                ov = self._overlapping(p, end)
                wait = next((e.pending for e in ov if e.pending is not None), None)
                if wait is None:
                    if len(ov) == 1 and ov[0].contains(p, n):
                        e = ov[0]
                        if e.read_only and not read_only:
                            if partial_ok:
                                return None
                            raise OffloadError(
                                ErrorCode.INVALID_ARGUMENT,
                                f"0x{p:x} ({n} bytes) lies in a buffer pinned read-only at "
                                f"0x{e.host:x} (its pages are read-only): a writable use "
                                f"cannot share that pin")
                        c = e.count.get(device)
                        if c is not None:                       # fast path
                            e.count[device] = c + 1
                            if owner is not None:
                                e.owners.append((device, kind, owner))
                            return e.dev[device] + (p - e.host)
                        e.pending = self._pending()           # first use by this device
                        new = False
                        break
                    if ov:
                        if partial_ok:
                            return None
                        o = ov[0]
                        raise OffloadError(
                            ErrorCode.INVALID_ARGUMENT,
                            f"partial overlapping not allowed in locked buffers: "
                            f"0x{p:x} ({n} bytes) overlaps the locked buffer at "
                            f"0x{o.host:x} ({o.size} bytes)")
                    if not create:
                        return None
                    e = PinnedEntry(p, n, kind, read_only)
                    e.pending = self._pending()
                    self._insert(e)
                    new = True
                    break
            with wait:                      # until the driver call ends
                pass
        return self._pin_pending(driver, e, new, p, n, device, owner, kind)

    def _pin_pending(self, driver: PinDriver, e: PinnedEntry, new: bool,
                     p: int, n: int, device: int, owner: Any, kind: Kind) -> int:
        """Do the driver call for a pending entry, outside the lock."""
        try:
            ext = driver.query(p, n) if new else None
            if ext is not None:
                addr = self._become_external(e, ext, p, n)
            else:
                first = not e.ours and e.kind is not Kind.EXTERNAL \
                    and e.kind is not Kind.ALLOC_HOST
                addr = driver.pin(device, e.host, e.size, first=first, read_only=e.read_only)
                e.ours.add(device)
                if first:                                   # what the driver really made
                    e.read_only = driver.pin_is_read_only(e.host)
        except BaseException:
            with self._lock:
                if new:
                    self._remove(e)
                self._settle(e)
            raise
        with self._lock:
            e.dev[device] = addr
            e.count[device] = 1
            if owner is not None:
                e.owners.append((device, kind, owner))
            self._settle(e)
        return addr + (p - e.host)

    def _become_external(self, e: PinnedEntry, ext: tuple[int, int, int],
                         p: int, n: int) -> int:
        """Widen a new pending entry to the driver's pinned range.

        Returns the device address of the entry's (possibly new) start.
        """
        base, size, addr = ext
        with self._lock:
            e.kind = Kind.EXTERNAL
            if base <= p and p + n <= base + size:
                others = [o for o in self._overlapping(base, base + size) if o is not e]
                if not others:
                    self._remove(e)
                    e.host, e.size = base, size
                    self._insert(e)
                    return addr
        return addr + (p - base)

    def release(self, driver: PinDriver, p: int, device: int, *,
                what: str = "locked buffer", kind: Kind = Kind.USER) -> None:
        """Drop one reference that `device` holds on the entry containing p (taken with
        `kind`: its owner, if it named one, is let go)."""
        while True:
            with self._lock:
                ov = self._overlapping(p, p + 1)
                e = ov[0] if ov else None
                if e is None or (device not in e.count and e.pending is None):
                    raise OffloadError(ErrorCode.NOT_FOUND,
                                       f"cannot find {what} 0x{p:x} for device {device}")
                if e.pending is not None:
                    wait = e.pending
                else:
                    c = e.count[device]
                    if c <= e.floor.get(device, 0):
                        raise OffloadError(
                            ErrorCode.INVALID_ARGUMENT,
                            f"0x{p:x} was allocated by llvm_omp_target_alloc_host and holds "
                            f"no lock of its own to release; free it with "
                            f"llvm_omp_target_free_host")
                    if c > 1:
                        e.count[device] = c - 1
                        self._drop_owner(e, device, kind)
                        return
                    if device not in e.ours:            # external, or alloc_host's own
                        self._drop_device(e, device, len(e.count) == 1)
                        return
                    # the driver lets go when no other device holds our pin
                    last = e.ours == {device} and e.kind not in (Kind.EXTERNAL,
                                                                 Kind.ALLOC_HOST)
                    e.pending = self._pending()
                    break
            with wait:                      # until the driver call ends
                pass
        try:
            driver.unpin(device, e.host, e.size, last=last)
        except BaseException:
            with self._lock:
                self._settle(e)
            raise
        with self._lock:
            e.ours.discard(device)
            self._drop_device(e, device, len(e.count) == 1)
            self._settle(e)

    @staticmethod
    def _drop_owner(e: PinnedEntry, device: int, kind: Kind) -> None:
        """Let go of the newest owner a reference of `device` and `kind` named."""
        for i in range(len(e.owners) - 1, -1, -1):
            if e.owners[i][0] == device and e.owners[i][1] is kind:
                del e.owners[i]
                return

    def _drop_device(self, e: PinnedEntry, device: int, last: bool) -> None:
        del e.count[device]
        e.dev.pop(device, None)
        e.owners[:] = [o for o in e.owners if o[0] != device]
        if last:
            self._remove(e)
            e.owners.clear()

    # ---- the rest ---------------------------------------------------------
    def insert_allocated(self, p: int, n: int, device: int, dev_addr: int) -> None:
        """Register memory the runtime allocated pinned (kind alloc_host)."""
        e = PinnedEntry(p, n, Kind.ALLOC_HOST)
        e.count[device] = 1
        e.floor[device] = 1
        e.dev[device] = dev_addr
        with self._lock:
            if self._overlapping(p, p + n):
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"allocated host memory 0x{p:x} overlaps a pinned entry")
            self._insert(e)

    def remove_allocated(self, p: int) -> PinnedEntry | None:
        """Forget an alloc_host entry at its free; return it (None if unknown)."""
        with self._lock:
            ov = self._overlapping(p, p + 1)
            if not ov or ov[0].host != p or ov[0].kind is not Kind.ALLOC_HOST:
                return None
            self._remove(ov[0])
            return ov[0]

    def translate(self, p: int, n: int, device: int) -> list[tuple[int, int, int | None]]:
        """Split [p, p+n) at entry boundaries: (offset, length, device address or None)."""
        if not self._starts:
            return [(0, n, None)]           # nothing pinned at all (no lock needed)
        with self._lock:
            i = bisect.bisect_right(self._starts, p) - 1
            if i >= 0 and n > 0:            # one entry holds it all: the common case
                e = self._entries[i]
                if p + n <= e.host + e.size and e.pending is None:
                    addr = e.dev.get(device)
                    if addr is not None:
                        return [(0, n, addr + (p - e.host))]
            ov = self._overlapping(p, p + n)
        pieces: list[tuple[int, int, int | None]] = []
        pos = p
        end = p + n
        for e in ov:
            addr = e.dev.get(device) if e.pending is None else None
            if addr is None:
                continue
            lo = max(e.host, p)
            hi = min(e.end, end)
            if lo > pos:
                pieces.append((pos - p, lo - pos, None))
            pieces.append((lo - p, hi - lo, addr + (lo - e.host)))
            pos = hi
        if pos < end:
            pieces.append((pos - p, end - pos, None))
        return pieces

    def lookup(self, p: int) -> PinnedEntry | None:
        with self._lock:
            ov = self._overlapping(p, p + 1)
            return ov[0] if ov else None

    def entries(self) -> list[PinnedEntry]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> list[PinnedEntry]:
        """Remove every entry and return them (teardown, fork)."""
        with self._lock:
            out = self._entries
            self._starts, self._entries = [], []
        for e in out:
            self._settle(e)
        return out
