"""A pin's lifetime with the runtime's: Pinned handles and locked(), alloc_host
memory, notify-mapped modes, unlocks while mapped, teardown, fork, 16 threads, and
map/unmap cycles of a locked array."""
import gc
import os
import random
import weakref

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.pinned import Kind
from offload.plugins.host import PAGE
from tests.harness import run_threads

from tests.conftest import page_aligned, vmlck_kb


def test_pinned_handle_holds_one_reference(rt):
    a = np.zeros(1000, np.float64)
    h1 = offload.lock(a, device=0)
    h2 = offload.lock(a, device=0)
    assert h1.device_address == a.ctypes.data
    h1.unlock()
    with pytest.raises(OffloadError) as ei:
        h1.unlock()
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT and "already unlocked" in str(ei.value)
    plugin = offload.runtime.current().manager.get_device(0).plugin
    assert plugin.pinned.lookup(a.ctypes.data).count == {0: 1}     # h2's reference remains
    h2.unlock()
    assert len(plugin.pinned) == 0


def test_locked_context_manager(rt):
    a = page_aligned(3 * PAGE)
    base = vmlck_kb()
    with offload.locked(a, device=1) as pin:
        assert vmlck_kb() - base == 12
        assert pin.locked
    assert vmlck_kb() == base and not pin.locked
    with pytest.raises(RuntimeError):
        with offload.locked(a, device=1):
            raise RuntimeError("boom")
    assert vmlck_kb() == base


def test_runtime_keeps_pinned_owner_alive(rt):
    """§5 row: a numpy array dropped while pinned is not freed under the device."""
    a = np.arange(10000, dtype=np.float64)
    ref = weakref.ref(a)
    p = a.ctypes.data
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == p
    del a
    gc.collect()
    assert ref() is not None
    offload.llvm_omp_target_unlock_mem(p, 0)
    gc.collect()
    assert ref() is None


def test_alloc_host_is_pinned_and_one_unlock_too_many_is_an_error(recording):
    """§5 row: LLVM aborts at the later free; we fail the unlock and keep the memory."""
    base = vmlck_kb()
    p = offload.llvm_omp_target_alloc_host(3 * PAGE, 0)
    assert p
    e = recording.pinned.lookup(p)
    assert e.kind is Kind.ALLOC_HOST
    assert vmlck_kb() - base >= 12
    assert offload.llvm_omp_target_lock_mem(p + 10, 100, 0) == p + 10
    offload.llvm_omp_target_unlock_mem(p + 10, 0)
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).unlock(p)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    arr = np.frombuffer((np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * 16)
                                                .from_address(p))), np.uint8)
    arr[:] = 7                                    # still usable
    assert arr.sum() == 7 * 16
    offload.llvm_omp_target_free_host(p, 0)
    assert len(recording.pinned) == 0
    assert vmlck_kb() == base


def test_notify_mapped_modes(runtime):
    for mode, pins in (("off", False), ("on", True), ("mandatory", True)):
        m = runtime(OFFLOAD_PLUGINS="recording", LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=mode)
        plugin = m.plugins[0]
        plugin.init_device(0)
        a = np.zeros(100, np.uint8)
        got = plugin.data_notify_mapped(0, a.ctypes.data, 100, owner=a)
        assert (got is not None) == pins
        if pins:
            assert plugin.pinned.lookup(a.ctypes.data).kind is Kind.MAPPED
            plugin.data_notify_unmapped(0, a.ctypes.data)
        assert len(plugin.pinned) == 0


def test_notify_mapped_failure_on_vs_mandatory(runtime, monkeypatch):
    for mode in ("on", "mandatory"):
        m = runtime(OFFLOAD_PLUGINS="recording", LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=mode)
        plugin = m.plugins[0]
        plugin.init_device(0)

        def boom(*a, **k):
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "injected")
        monkeypatch.setattr(plugin.pages, "lock", boom)
        a = np.zeros(100, np.uint8)
        if mode == "on":
            assert plugin.data_notify_mapped(0, a.ctypes.data, 100) is None
        else:
            with pytest.raises(OffloadError):
                plugin.data_notify_mapped(0, a.ctypes.data, 100)
        assert len(plugin.pinned) == 0


def test_user_unlock_while_mapped_keeps_pages_pinned(rt):
    a = page_aligned(4 * PAGE)
    base = vmlck_kb()
    pin = offload.lock(a, device=0)
    offload.target_enter_data(offload.to(a), device=0)
    pin.unlock()
    assert vmlck_kb() - base == 16            # the mapping still holds the pin
    offload.target_exit_data(offload.release(a), device=0)
    assert vmlck_kb() == base


def test_teardown_unpins_and_later_unlock_is_quiet(rt, capsys):
    a = page_aligned(2 * PAGE)
    base = vmlck_kb()
    pin = offload.lock(a, device=0)
    d = offload.omp_target_alloc(1024, 0)
    assert vmlck_kb() - base == 8
    offload.shutdown()
    assert vmlck_kb() == base
    offload.llvm_omp_target_unlock_mem(a, 0)     # quiet no-ops after teardown
    offload.omp_target_free(d, 0)
    assert capsys.readouterr().err == ""
    offload.shutdown()                            # once: a second call does nothing
    offload.runtime.current()                     # a new runtime ...
    pin.unlock()                                  # ... and the old handle stays quiet
    assert not pin.locked


def test_fork_child_starts_empty(rt):
    a = page_aligned(2 * PAGE)
    offload.lock(a, device=0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # child
        try:
            ok = (vmlck_kb() == 0 and
                  len(offload.runtime.current().manager.get_device(0).plugin.pinned) == 0 and
                  offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == a.ctypes.data and
                  vmlck_kb() == 8)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert len(offload.runtime.current().manager.get_device(0).plugin.pinned) == 1


def test_stress_16_threads(rt):
    """16 threads x 5,000 random lock/unlock on overlapping sub-ranges of shared buffers."""
    bufs = [page_aligned(8 * PAGE) for _ in range(4)]
    base = vmlck_kb()
    dev0 = offload.runtime.current().manager.get_device(0)
    dev1 = offload.runtime.current().manager.get_device(1)
    unexpected = []

    def work(seed):
        rng = random.Random(seed)
        held = []
        for _ in range(5000):
            if held and rng.random() < 0.5:
                dev, p = held.pop(rng.randrange(len(held)))
                try:
                    dev.unlock(p)
                except OffloadError as exc:
                    unexpected.append(exc)
                continue
            b = rng.choice(bufs)
            off = rng.randrange(0, b.nbytes - 1)
            n = rng.randrange(1, min(3 * PAGE, b.nbytes - off) + 1)
            dev = dev0 if rng.random() < 0.7 else dev1
            try:
                dev.lock(b.ctypes.data + off, n)
                held.append((dev, b.ctypes.data + off))
            except OffloadError as exc:
                if exc.code is not ErrorCode.INVALID_ARGUMENT:
                    unexpected.append(exc)
        for dev, p in held:
            dev.unlock(p)

    run_threads(work, [(i,) for i in range(16)])
    assert unexpected == []
    assert len(dev0.plugin.pinned) == 0
    assert vmlck_kb() == base


def test_map_unmap_cycles_of_a_locked_array_keep_nothing_extra(runtime):
    """Each mapping of a locked array takes a reference on its pin naming the array; the
    unmap lets that go again (no list growing with every region), and an array whose
    only named reference is gone is not kept alive by the pin."""
    import gc
    import weakref
    runtime(OFFLOAD_PLUGINS="host")
    a = np.zeros(4096, dtype=np.uint8)
    assert offload.llvm_omp_target_lock_mem(a.ctypes.data, a.nbytes, 0)   # no owner named
    entry = offload.runtime.current().manager.plugins[0].pinned._overlapping(
        a.ctypes.data, a.ctypes.data + 1)[0]
    for _ in range(100):
        with offload.target_data(offload.tofrom(a[10:20]), device=0):
            assert len(entry.owners) == 1
    assert entry.owners == []
    w = weakref.ref(a)
    p = a.ctypes.data
    del a
    gc.collect()
    assert w() is None                      # the pin (by address) does not keep it
    offload.llvm_omp_target_unlock_mem(p, 0)
