"""Kernel record/replay's reserved block on a host-plugin device (LLVM 19's
RecordReplayTy): every device allocation is a 16-byte-aligned bump inside it, frees keep
it whole, a full block refuses with OUT_OF_RESOURCES, bad starts change nothing. The
files and their replay by LLVM's own tool: tests/capi/test_capi.py."""
import mmap

import pytest

from offload.config import read
from offload.errors import ErrorCode, OffloadError
from offload.plugins.host import HostPlugin
from offload.plugins.memory_pool import AllocKind


@pytest.fixture
def dev():
    plugin = HostPlugin(read())
    return plugin.init_device(0)


def test_allocations_bump_inside_the_block(dev):
    old = dev.alloc(100, AllocKind.DEVICE)           # made before: its own memory
    dev.free(old)
    assert dev.pool.bytes > 0                        # cached by the pool
    assert dev.start_record_replay(4096, 0, True, False) == 0
    arena = dev.arena
    assert arena.start % mmap.PAGESIZE == 0 and dev.pool.bytes == 0 and dev.pool.limit == 0
    a = dev.alloc(10, AllocKind.DEVICE)
    b = dev.alloc(1, AllocKind.DEVICE)
    c = dev.alloc(32, AllocKind.DEVICE)
    assert (a, b, c) == (arena.start, arena.start + 16, arena.start + 32)
    assert dev.containing(b + 0) == (b, 1)
    dev.free(b)                                      # kept: the next one follows c
    assert dev.allocation(b) is None
    assert dev.alloc(16, AllocKind.DEVICE) == arena.start + 64 and arena.used == 80
    with pytest.raises(OffloadError) as e:
        dev.alloc(4096, AllocKind.DEVICE)
    assert e.value.code is ErrorCode.OUT_OF_RESOURCES and "record/replay memory" in str(e.value)
    assert arena.used == 80                          # a refusal takes nothing
    host = dev.alloc(64, AllocKind.HOST)             # host memory is not the device's
    assert not arena.holds(host)
    dev.free(host)


def test_block_at_the_address_asked_for(dev):
    from offload.plugins.generic_device import _REPLAY_ROOM
    probe = mmap.mmap(-1, (1 << 20) + _REPLAY_ROOM)  # find a free, page-aligned address
    import ctypes
    want = ctypes.addressof(ctypes.c_char.from_buffer(probe))
    probe.close()
    assert dev.start_record_replay(1 << 20, want, False, False) == 0
    assert dev.arena.start == want


def test_bad_starts_change_nothing(dev):
    for size in (0, -16):
        with pytest.raises(OffloadError, match=f"memory size {size}: must be positive"):
            dev.start_record_replay(size, 0, True, False)
    assert dev.arena is None and dev.pool.limit > 0
    dev.start_record_replay(1024, 0, True, False)
    arena = dev.arena
    with pytest.raises(OffloadError, match="already started"):
        dev.start_record_replay(1024, 0, True, False)
    assert dev.arena is arena


def test_a_replay_has_room_beyond_the_recorded_memory(dev):
    """Replaying, the block holds the recorded memory and what the launch allocates."""
    dev.start_record_replay(80, 0, False, False)
    assert dev.alloc(80, AllocKind.DEVICE) == dev.arena.start
    assert dev.alloc(16, AllocKind.DEVICE) == dev.arena.start + 80
