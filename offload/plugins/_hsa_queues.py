"""What every AMDGPU launch and copy needs, built directly on the HSA bindings: pooled
completion signals, a kernarg arena every GPU can read, and AQL hardware queues whose
packets are published with release ordering."""
from __future__ import annotations

from typing import Any

import cffi

from .. import locks
from ._hsa_runtime import (
    HSA,
    HSA_FENCE_SCOPE_SYSTEM,
    HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
    HSA_PACKET_HEADER_BARRIER,
    HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE,
    HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE,
    HSA_PACKET_HEADER_TYPE,
    HSA_PACKET_TYPE_BARRIER_AND,
    HSA_PACKET_TYPE_KERNEL_DISPATCH,
    HSA_QUEUE_TYPE_MULTI,
    HSA_STATUS_SUCCESS,
    ffi,
    uint,
)

# ---- publishing a packet: the header as a release store, on every architecture ----------
_atomic_ffi = cffi.FFI()
_atomic_ffi.cdef("void __atomic_store_4(void *ptr, uint32_t value, int memorder);")
try:
    _libatomic: Any = _atomic_ffi.dlopen("libatomic.so.1")
except OSError:                     # without libatomic: a plain store (a release on x86-64)
    _libatomic = None
_RELEASE = 3                        # __ATOMIC_RELEASE


def store_release_u32(address: Any, value: int) -> None:
    """Store a 32-bit word with release ordering (the AQL header+setup word)."""
    if _libatomic is not None:
        _libatomic.__atomic_store_4(_atomic_ffi.cast("void *", uint(address)), value, _RELEASE)
    else:
        ffi.cast("uint32_t *", address)[0] = value


# ---- pools of the resources every launch and copy needs ----------------------------------
class SignalPool:
    """Completion signals, reused: no hsa_signal_create/destroy per operation."""

    def __init__(self, hsa: HSA):
        self._hsa = hsa
        self._lock = locks.new_lock()
        self._free: list[Any] = []
        self._all: list[Any] = []

    def get(self) -> Any:
        """A signal with value 1 (one operation to complete)."""
        with self._lock:
            sig = self._free.pop() if self._free else None
        if sig is None:
            out = ffi.new("hsa_signal_t *")
            self._hsa.check(self._hsa.lib.hsa_signal_create(1, 0, ffi.NULL, out),
                            "hsa_signal_create")
            sig = out[0]
            with self._lock:
                self._all.append(sig)
        else:
            self._hsa.lib.hsa_signal_store_relaxed(sig, 1)
        return sig

    def put(self, sig: Any) -> None:
        with self._lock:
            self._free.append(sig)

    def destroy(self) -> None:
        with self._lock:
            signals, self._all, self._free = self._all, [], []
        for sig in signals:
            self._hsa.lib.hsa_signal_destroy(sig)


class KernargArena:
    """Kernel-argument buffers from the kernarg pool, made accessible to every GPU agent
    once (ROCr maps pool memory to the CPU only) and reused by size."""

    def __init__(self, hsa: HSA, pool: Any, agents: list[Any]):
        self._hsa = hsa
        self._pool = pool
        self._agents = agents
        self._lock = locks.new_lock()
        self._free: dict[int, list[int]] = {}
        self._all: list[int] = []

    def get(self, size: int) -> tuple[int, int]:
        """(address, size class) of a buffer of at least `size` bytes."""
        cls = max(256, -(-size // 256) * 256)
        with self._lock:
            free = self._free.get(cls)
            if free:
                return free.pop(), cls
        p = ffi.new("void **")
        self._hsa.check(self._hsa.lib.hsa_amd_memory_pool_allocate(self._pool, cls, 0, p),
                        "kernarg allocation")
        agents = ffi.new("hsa_agent_t[]", self._agents)
        status = self._hsa.lib.hsa_amd_agents_allow_access(len(self._agents), agents,
                                                           ffi.NULL, p[0])
        if status != HSA_STATUS_SUCCESS:
            self._hsa.lib.hsa_amd_memory_pool_free(p[0])
            self._hsa.check(status, "hsa_amd_agents_allow_access(kernarg)")
        with self._lock:
            self._all.append(uint(p[0]))
        return uint(p[0]), cls

    def put(self, address: int, cls: int) -> None:
        with self._lock:
            self._free.setdefault(cls, []).append(address)

    def destroy(self) -> None:
        with self._lock:
            buffers, self._all, self._free = self._all, [], {}
        for b in buffers:
            self._hsa.lib.hsa_amd_memory_pool_free(ffi.cast("void *", b))


_NO_SIGNAL = ffi.new("hsa_signal_t *")[0]


class AQLQueue:
    """One HSA hardware queue: packet slots, barrier-AND and kernel-dispatch packets
    (reserved fields zeroed, the header published last with release ordering)."""

    def __init__(self, hsa: HSA, agent: Any, size: int, error_callback: Any):
        q = ffi.new("hsa_queue_t **")
        hsa.check(hsa.lib.hsa_queue_create(agent, size, HSA_QUEUE_TYPE_MULTI, error_callback,
                                           ffi.NULL, 0xFFFFFFFF, 0xFFFFFFFF, q),
                  "hsa_queue_create")
        self._hsa = hsa
        self.q = q[0]
        self.id = uint(q[0])

    def destroy(self) -> None:
        self._hsa.lib.hsa_queue_destroy(self.q)

    def _slot(self, check: Any) -> tuple[int, Any]:
        """Reserve the next packet slot (spins while the ring is full; `check` raises
        when the queue has failed)."""
        lib, q = self._hsa.lib, self.q
        index = lib.hsa_queue_add_write_index_relaxed(q, 1)
        while index - lib.hsa_queue_load_read_index_scacquire(q) >= q.size:
            check()
        return index, ffi.cast("char *", q.base_address) + 64 * (index % q.size)

    def _publish(self, index: int, addr: Any, kind: int, setup: int) -> None:
        header = ((kind << HSA_PACKET_HEADER_TYPE) | (1 << HSA_PACKET_HEADER_BARRIER)
                  | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
                  | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE))
        store_release_u32(addr, header | (setup << 16))
        self._hsa.lib.hsa_signal_store_screlease(self.q.doorbell_signal, index)

    def barrier_and(self, dep: Any, check: Any, more: tuple = (), done: Any = None) -> None:
        """A barrier-AND packet: later packets wait for `dep` and up to four `more`
        signals (no host wait); `done` (if given) is decremented when they complete."""
        index, addr = self._slot(check)
        b = ffi.cast("hsa_barrier_and_packet_t *", addr)
        b.reserved0, b.reserved1, b.reserved2 = 0, 0, 0
        deps = (dep, *more)
        for i in range(5):
            b.dep_signal[i] = deps[i] if i < len(deps) else _NO_SIGNAL
        b.completion_signal = _NO_SIGNAL if done is None else done
        self._publish(index, addr, HSA_PACKET_TYPE_BARRIER_AND, 0)

    def dispatch(self, wg: int, grid: int, private: int, group: int, kernel_object: int,
                 kernarg: int, done: Any, check: Any) -> None:
        """A one-dimensional kernel-dispatch packet."""
        index, addr = self._slot(check)
        p = ffi.cast("hsa_kernel_dispatch_packet_t *", addr)
        p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z = wg, 1, 1
        p.reserved0 = 0
        p.grid_size_x, p.grid_size_y, p.grid_size_z = grid, 1, 1
        p.private_segment_size = private
        p.group_segment_size = group
        p.kernel_object = kernel_object
        p.kernarg_address = ffi.cast("void *", kernarg)
        p.reserved2 = 0
        p.completion_signal = done
        self._publish(index, addr, HSA_PACKET_TYPE_KERNEL_DISPATCH,
                      1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS)
