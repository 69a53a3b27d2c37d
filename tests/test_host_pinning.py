"""Issue 3: real mlock pinning through the host plugin and the public API."""
import gc
import os
import random
import weakref

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import offload
from offload import ErrorCode, OffloadError
from offload.pinned import Kind
from offload.plugins.host import PAGE
from tests.harness import run_threads

from .conftest import page_aligned, vmlck_kb


def _pages(p, n):
    return set(range(p // PAGE, -(-(p + n) // PAGE)))


class HostPinMachine(RuleBasedStateMachine):
    """Random lock/unlock on byte ranges of a 16-page buffer; VmLck follows the model."""

    def __init__(self):
        super().__init__()
        offload.shutdown()
        os.environ["OFFLOAD_PLUGINS"] = "host"
        os.environ["OFFLOAD_HOST_NUM_DEVICES"] = "2"
        self.buf = page_aligned(16 * PAGE)
        self.base = self.buf.ctypes.data
        self.base_kb = vmlck_kb()
        self.entries = []       # [start, end, {dev: count}]

    def teardown(self):
        offload.shutdown()
        os.environ.pop("OFFLOAD_PLUGINS")
        os.environ.pop("OFFLOAD_HOST_NUM_DEVICES")

    def _find(self, p, n):
        return [e for e in self.entries if e[0] < p + n and p < e[1]]

    @rule(off=st.integers(0, 16 * PAGE - 1), n=st.integers(1, 3 * PAGE), d=st.integers(0, 1))
    def lock(self, off, n, d):
        p = self.base + off
        n = min(n, 16 * PAGE - off)
        ov = self._find(p, n)
        inside = len(ov) == 1 and ov[0][0] <= p and p + n <= ov[0][1]
        addr = offload.llvm_omp_target_lock_mem(p, n, d)
        if inside or not ov:
            assert addr == p
            if inside:
                ov[0][2][d] = ov[0][2].get(d, 0) + 1
            else:
                self.entries.append([p, p + n, {d: 1}])
        else:
            assert addr == 0

    @rule(i=st.integers(0, 50), d=st.integers(0, 1), interior=st.booleans())
    def unlock(self, i, d, interior):
        if not self.entries:
            return
        e = self.entries[i % len(self.entries)]
        p = e[0] + ((e[1] - e[0]) // 2 if interior else 0)
        offload.llvm_omp_target_unlock_mem(p, d)
        if d in e[2]:
            e[2][d] -= 1
            if e[2][d] == 0:
                del e[2][d]
                if not e[2]:
                    self.entries.remove(e)

    @invariant()
    def vmlck_matches_model(self):
        pages = set()
        for s, e, _ in self.entries:
            pages |= _pages(s, e - s)
        assert vmlck_kb() - self.base_kb == len(pages) * PAGE // 1024


TestHostPinMachine = HostPinMachine.TestCase
TestHostPinMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


# ---- SEMANTICS.md §1, rule by rule --------------------------------------------------
def test_lock_rejects_bad_sizes_and_null(recording, capsys):
    a = np.zeros(100, np.uint8)
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).lock(a.ctypes.data, 0)
    assert ei.value.code is ErrorCode.INVALID_VALUE
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).lock(0, 10)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    assert offload.llvm_omp_target_lock_mem(a, -1, 0) == 0
    assert recording.of("lock") == []


def test_lock_inside_entry_is_counted_fast_path(recording):
    a = np.zeros(10000, np.uint8)
    p = a.ctypes.data
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == p
    assert offload.llvm_omp_target_lock_mem(p + 100, 50, 0) == p + 100
    assert len(recording.of("lock")) == 1
    assert recording.pinned.lookup(p).count == {0: 2}
    offload.llvm_omp_target_unlock_mem(p + 120, 0)
    offload.llvm_omp_target_unlock_mem(p, 0)
    assert recording.of("unlock") == [("unlock", 0, p, a.nbytes, True)]


def test_lock_twice_unlock_twice(recording):
    a = page_aligned(4 * PAGE)
    base = vmlck_kb()
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert vmlck_kb() - base == 16
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert vmlck_kb() == base


def test_partial_overlap_rejected_before_driver_call(recording, capsys):
    """§5 row: LLVM pins first, then fails the insert, leaking the pin."""
    a = np.zeros(8192, np.uint8)
    p = a.ctypes.data
    offload.llvm_omp_target_lock_mem(p + 1000, 1000, 0)
    calls = len(recording.calls)
    for start, n in ((p + 500, 1000), (p + 1500, 1000), (p + 500, 3000)):
        assert offload.llvm_omp_target_lock_mem(start, n, 0) == 0
    assert len(recording.calls) == calls
    assert "partial overlapping not allowed in locked buffers" in capsys.readouterr().err
    assert len(recording.pinned) == 1
    offload.llvm_omp_target_unlock_mem(p + 1000, 0)


def test_spanning_two_entries_rejected(recording):
    a = np.zeros(8192, np.uint8)
    p = a.ctypes.data
    offload.llvm_omp_target_lock_mem(p, 100, 0)
    offload.llvm_omp_target_lock_mem(p + 200, 100, 0)
    with pytest.raises(OffloadError, match="partial overlapping"):
        offload.runtime.current().manager.get_device(0).lock(p + 50, 200)
    assert len(recording.pinned) == 2


def test_failed_pin_leaves_state_unchanged(runtime, monkeypatch):
    """§5 row: a failed insert leaves nothing behind (here the driver itself fails)."""
    m = runtime(OFFLOAD_PLUGINS="recording")
    plugin = m.plugins[0]

    def boom(*a, **k):
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "mlock failed (injected)")

    monkeypatch.setattr(plugin.pages, "lock", boom)
    a = np.zeros(100, np.uint8)
    base = vmlck_kb()
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0) == 0
    assert len(plugin.pinned) == 0 and vmlck_kb() == base
    with pytest.raises(OffloadError) as ei:
        offload.lock(a, device=0)
    assert ei.value.code is ErrorCode.OUT_OF_RESOURCES


def test_mlock_beyond_rlimit_names_the_limit(runtime):
    """Past RLIMIT_MEMLOCK (in a child without CAP_IPC_LOCK): OUT_OF_RESOURCES naming it."""
    import subprocess
    import sys
    code = (
        "import ctypes, resource, numpy as np, offload\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))\n"
        "# CAP_IPC_LOCK ignores the limit: drop it from this process (capget/capset, v3)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
        "data = (ctypes.c_uint32 * 6)()\n"
        "assert libc.capget(hdr, data) == 0\n"
        "data[0] &= ~(1 << 14); data[1] &= ~(1 << 14)   # effective, permitted\n"
        "assert libc.capset(hdr, data) == 0, ctypes.get_errno()\n"
        "a = np.zeros(16 << 20, np.uint8)\n"
        "try:\n"
        "    offload.lock(a, device=0)\n"
        "    print('LOCKED')\n"
        "except offload.OffloadError as e:\n"
        "    print(e.code.name, str(e))\n")
    env = dict(os.environ, OFFLOAD_PLUGINS="host",
               PYTHONPATH=os.pathsep.join(filter(None, [
                   os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   os.environ.get("PYTHONPATH")])),
               OFFLOAD_CACHE_DIR="/tmp/offload-rlimit-test")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    if "LOCKED" in out.stdout:
        pytest.skip("this process may lock past RLIMIT_MEMLOCK (CAP_IPC_LOCK kept)")
    assert "OUT_OF_RESOURCES" in out.stdout, out.stderr
    assert "RLIMIT_MEMLOCK is 65536 bytes" in out.stdout


def test_unlock_of_never_locked_is_not_found(recording, capsys):
    a = np.zeros(10, np.uint8)
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert "cannot find locked buffer" in capsys.readouterr().err
    with pytest.raises(OffloadError) as ei:
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)
    assert ei.value.code is ErrorCode.NOT_FOUND
    assert recording.of("unlock") == []


def test_unlock_once_too_often(recording):
    a = np.zeros(10, np.uint8)
    offload.llvm_omp_target_lock_mem(a, 10, 0)
    offload.llvm_omp_target_unlock_mem(a, 0)
    with pytest.raises(OffloadError, match="cannot find locked buffer"):
        offload.runtime.current().manager.get_device(0).unlock(a.ctypes.data)


def test_same_range_for_two_devices_one_pin(recording):
    """§5 row: one registry entry, one driver pin, unpinned after the last device."""
    a = page_aligned(2 * PAGE)
    base = vmlck_kb()
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 1)
    assert [c[4] for c in recording.of("lock")] == [True, False]
    assert len(recording.pinned) == 1
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert vmlck_kb() - base == 8
    offload.llvm_omp_target_unlock_mem(a, 1)
    assert vmlck_kb() == base
    assert [c[4] for c in recording.of("unlock")] == [False, True]


def test_unlock_on_other_device_is_not_found(recording):
    a = np.zeros(64, np.uint8)
    offload.llvm_omp_target_lock_mem(a, 64, 0)
    with pytest.raises(OffloadError, match="cannot find locked buffer"):
        offload.runtime.current().manager.get_device(1).unlock(a.ctypes.data)
    offload.llvm_omp_target_unlock_mem(a, 0)


def test_two_entries_sharing_a_page_do_not_unpin_each_other(recording):
    a = page_aligned(PAGE)
    p = a.ctypes.data
    base = vmlck_kb()
    offload.llvm_omp_target_lock_mem(p, 100, 0)
    offload.llvm_omp_target_lock_mem(p + 200, 100, 0)
    offload.llvm_omp_target_unlock_mem(p, 0)
    assert vmlck_kb() - base == 4
    offload.llvm_omp_target_unlock_mem(p + 200, 0)
    assert vmlck_kb() == base


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
