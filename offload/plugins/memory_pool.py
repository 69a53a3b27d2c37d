"""Allocation kinds, and the pool of freed device memory kept for reuse."""
from __future__ import annotations

import enum


class AllocKind(enum.Enum):
    """What an allocation is: device memory, pinned host memory, or managed memory."""

    DEVICE = "device"
    HOST = "host"        # pinned host memory (llvm_omp_target_alloc_host)
    SHARED = "shared"    # managed memory (llvm_omp_target_alloc_shared)


class DevicePool:
    """Freed device memory, by exact size, up to `limit` bytes; reused by the next
    allocation of the same size and given back (`trim`) when the device runs out.
    Guarded by its device's lock (GenericDevice._lock): it has none of its own."""

    def __init__(self, limit: int):
        self.limit = limit
        self._free: dict[int, list[int]] = {}
        self.bytes = 0

    def take(self, size: int) -> int | None:
        """A cached block of exactly `size` bytes, or None."""
        cached = self._free.get(size)
        if not cached:
            return None
        self.bytes -= size
        return cached.pop()

    def give(self, addr: int, size: int) -> bool:
        """Keep a freed block; False when the pool is full (free it for real)."""
        if self.bytes + size > self.limit:
            return False
        cached = self._free.get(size)
        if cached is None:
            self._free[size] = [addr]
        else:
            cached.append(addr)
        self.bytes += size
        return True

    def trim(self) -> list[tuple[int, int]]:
        """Empty the pool; the (address, size) blocks to free for real."""
        blocks = [(a, size) for size, addrs in self._free.items() for a in addrs]
        self._free.clear()                # in place: the accelerator holds this dict
        self.bytes = 0
        return blocks
