"""Device memory that device_array exported (DLPack, the CUDA Array Interface): a block
stays allocated while any view of it lives, even after its mapping is removed or the
runtime shuts down (the DLPack contract: the memory is valid until the consumer's deleter
runs). Freed by then, it is kept here and freed with its last view; a device whose
teardown finds such blocks finishes its teardown then."""
from __future__ import annotations

from collections.abc import Callable

from .. import locks
from ..interrupts import defers_interrupts
from .memory_pool import AllocKind

Free = Callable[[int, int, AllocKind], None]


class ExportedBlocks:
    """One device's exported blocks: live views by block address, blocks freed while
    viewed (address -> size, kind), and the teardown left until they go."""

    def __init__(self, free: Free) -> None:
        self._free = free                  # the device's own free (no pool, no record)
        self._lock = locks.new_lock()
        self._views: dict[int, int] = {}
        self._orphans: dict[int, tuple[int, AllocKind]] = {}
        self._finish: Callable[[], None] | None = None

    def hold(self, addr: int) -> None:
        """A view of the block at `addr` was made."""
        with self._lock:
            self._views[addr] = self._views.get(addr, 0) + 1

    @defers_interrupts       # a finalizer's callee: a Ctrl-C mid-count would lose a hold
    def release(self, addr: int) -> None:
        """A view of `addr` is gone: the last one frees the block if it was freed
        meanwhile, and then the device's teardown, if it waited. A view's finalizer calls
        this; the collector never runs it inside a locked step (offload.locks)."""
        orphan = finish = None
        with self._lock:
            n = self._views.pop(addr, 1) - 1
            if n > 0:
                self._views[addr] = n
            else:
                orphan = self._orphans.pop(addr, None)
                if orphan is not None and not self._orphans:
                    finish, self._finish = self._finish, None
        try:
            if orphan is not None:
                self._free(addr, *orphan)
        finally:
            if finish is not None:
                finish()

    def adopt(self, addr: int, size: int, kind: AllocKind) -> bool:
        """Whether a block being freed has views: then it is kept, and freed with the
        last of them."""
        with self._lock:
            kept = addr in self._views
            if kept:
                self._orphans[addr] = (size, kind)
        return kept

    def defer(self, finish: Callable[[], None]) -> bool:
        """Whether teardown must wait for exported blocks: then `finish` runs when the
        last is freed."""
        with self._lock:
            waits = bool(self._orphans)
            if waits:
                self._finish = finish
        return waits

    def __len__(self) -> int:
        """Blocks freed by the runtime and still viewed."""
        with self._lock:
            return len(self._orphans)
