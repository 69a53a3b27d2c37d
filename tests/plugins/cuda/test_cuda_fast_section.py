"""A C-ABI region whose one plain section is mapped nowhere (a reduction's scalar:
BabelStream's Dot, `map(tofrom: sum)` beside arrays already mapped) run by the compiled
core in one pass (launch_present_map; accel_c/section.c): the section's entry made from a
pooled block, its bytes sent through the taken stream's pinned bounce buffer before the
launch and brought back after it, one wait, then the entry gone, its bytes copied back and
the block back on the pool, as Region.single_range's map and unmap leave them. Driven
through the stand-in driver (tests/fakes/cuda_driver.py) on a host table, so it runs without a GPU
(tests/capi/test_capi_gpu.py runs it on one)."""
import ctypes
import threading

import numpy as np
import pytest

import offload
from offload.capi import kernels
from offload.clauses import MapItem, MapType
from offload.plugins.accel_specs import CudaCopier, LaunchSpec, OmpLaunchPlan
from offload.plugins.memory_pool import AllocKind
from tests.fakes.cuda_driver import Dead, Driver, ffi
from tests.plugins.cuda.test_cuda_fast import accel_table  # noqa: F401

SPEC = LaunchSpec(0xF00, 32, 32, 0, (8, 8, 8), "dot", "cuLaunchKernel(dot)")
PARAM, TO, FROM = 0x20, 0x1, 0x2
STREAMS = (0x51, 0x52)
LIMIT = 64                                    # each stand-in bounce buffer's bytes


class Setup:
    """A host table copying and launching through the stand-in driver `d`, with a bounce
    buffer per stream; an array mapped on it (the region's present part)."""

    def __init__(self, accel_table, monkeypatch, d, poll=None, bounce=None):
        from offload.plugins.host import HostDevice
        self.d, self.polls, self.checks, self.kept = d, [], [], []
        self.bounces = [np.zeros(LIMIT, np.uint8) for _ in STREAMS]
        f = d.fns

        def default_poll(stream):
            self.polls.append(stream)
            d.busy_polls = 0
            return 0

        def check(rc, what):
            self.checks.append((rc, what))
            raise offload.OffloadError(offload.ErrorCode.BACKEND_FAILURE, f"{what} failed: {rc}")

        def addr(fn):
            return int(ffi.cast("uintptr_t", fn))
        given = (tuple(b.ctypes.data for b in self.bounces), LIMIT)
        monkeypatch.setattr(HostDevice, "accel_copier", lambda dev: CudaCopier(
            "cuda", addr(f["ctx"]), 0xC7, addr(f["copy"]), addr(f["copy"]), addr(f["query"]),
            1e-3, STREAMS, tuple(f"stream{i}" for i in range(len(STREAMS))),
            poll or default_poll, check, Dead(), dev.id, 0, addr(f["launch"]),
            addr(f["memset"]), bounce or (lambda: given)))
        accel_table(OFFLOAD_ACCEL=1)
        self.dev = offload.runtime.current().device(0)
        self.table, self.g = self.dev.table, self.dev.generic
        self.a = np.zeros(16, dtype=np.int64)
        self.table.target_data_begin([MapItem(self.a.ctypes.data, self.a.nbytes, MapType.TO)])

    def pool_block(self, n=8):
        """A block of n bytes on the device's pool (as a freed mapping leaves one)."""
        self.g.free(self.g.alloc(n, AllocKind.DEVICE))
        return self.g.pool._free[n][-1]

    def arrays(self, s, t=TO | FROM | PARAM, size=None):
        """launch_present_map's arrays: a pointer into the mapped array, then section `s`."""
        p, q = self.a.ctypes.data, s.ctypes.data
        rows = [(ctypes.c_void_p * 2)(p, q), (ctypes.c_void_p * 2)(p, q),
                (ctypes.c_int64 * 2)(0, s.nbytes if size is None else size),
                (ctypes.c_int64 * 2)(PARAM, t)]
        self.kept.append(rows)                 # alive while the test runs
        return (2, *(ctypes.addressof(r) for r in rows), 0)

    def only_the_array_left(self):
        assert [e.hst_begin for e in self.table.entries()] == [self.a.ctypes.data]
        assert [e.busy for e in self.table.entries()] == [0]


def _add_to_the_scalar(value):
    """The stand-in kernel: the section's device double (argument 2) += value."""
    def kernel(params):
        tgt = ffi.cast("unsigned long long *", params[2])[0]
        ctypes.c_double.from_address(tgt).value += value
    return kernel


def test_a_section_mapped_nowhere_is_made_sent_launched_brought_back_in_one_wait(
        accel_table, monkeypatch):
    d = Driver(busy_polls=1)
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    s = np.array([1.5])
    live, hits = st.g.live_allocations(), st.g.stats["pool hits"]
    before = dict(st.g.stats)
    d.kernel = _add_to_the_scalar(5.0)
    d.calls.clear()
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 7) is True
    bounce = st.bounces[0].ctypes.data
    assert d.calls[:5] == [("ctx", 0xC7), ("copy", block, bounce, 8, 0x51),
                           ("launch", 0xF00, 32, 1, 1, 32, 1, 1, 0, 0x51, 7, True),
                           ("copy", bounce, block, 8, 0x51), ("query",)]
    assert d.calls[5:] == [("query",)] and not st.checks and not st.polls   # one wait
    assert s[0] == 6.5                                    # sent, added to, brought back
    st.only_the_array_left()
    assert st.g.pool._free[8] == [block] and st.g.live_allocations() == live
    assert st.g.stats["pool hits"] == hits + 1
    moved = {k: st.g.stats[k] - before[k] for k in before if st.g.stats[k] != before[k]}
    assert moved == {"to staged": 8, "to staged ops": 1, "to unpinned": 8,
                     "to unpinned ops": 1, "from staged": 8, "from staged ops": 1,
                     "from unpinned": 8, "from unpinned ops": 1, "pool hits": 1}


@pytest.mark.parametrize("t, sent, back", [(FROM | PARAM, False, True),
                                           (TO | PARAM, True, False)])
def test_only_the_sections_own_directions_are_copied(accel_table, monkeypatch, t, sent, back):
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    ctypes.c_double.from_address(block).value = 100.0     # what the device holds
    s = np.array([1.0])
    d.kernel = _add_to_the_scalar(2.0)
    d.calls.clear()
    assert st.table.steps.launch_present_map(*st.arrays(s, t), SPEC, 0) is True
    copies = [c for c in d.calls if c[0] == "copy"]
    assert [c[1] == block for c in copies] == [True] * sent + [False] * back
    assert s[0] == (102.0 if back else 1.0)               # FROM: the device's sum, else ours
    st.only_the_array_left()


def test_sections_the_core_does_not_make_are_left_to_python_with_nothing_done(
        accel_table, monkeypatch):
    """Larger than the bounce, not from its base, a bit other than TO/FROM/TARGET_PARAM,
    no pooled block of its size, or a pinned range on the plugin: present_map's
    (base, begin, size, type) as before, no driver call, nothing in the table."""
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    st.pool_block(8)
    big, s = np.zeros(LIMIT // 8 + 1), np.array([1.0])
    cases = [st.arrays(big, size=big.nbytes), st.arrays(s, TO | FROM | PARAM | 0x200),
             st.arrays(np.array([1.0, 2.0]))]                     # 16 bytes: none pooled
    for arrays in cases:
        got = st.table.steps.launch_present_map(*arrays, SPEC, 0)
        assert type(got) is tuple and d.calls == [], got
        st.only_the_array_left()
    pinned = np.zeros(512)
    offload.llvm_omp_target_lock_mem(pinned, pinned.nbytes, 0)
    try:
        assert type(st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0)) is tuple
    finally:
        offload.llvm_omp_target_unlock_mem(pinned, 0)
    assert d.calls == [] and st.g.pool._free[8]                  # the block still pooled
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0) is True


def test_a_failed_launch_copies_nothing_back_and_frees_the_block(accel_table, monkeypatch):
    d = Driver(op_rc=719)                                  # CUDA_ERROR_LAUNCH_FAILED
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    s = np.array([3.0])
    live = st.g.live_allocations()
    with pytest.raises(offload.OffloadError, match="cuLaunchKernel\\(dot\\) failed: 719"):
        st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0)
    assert s[0] == 3.0 and st.checks == [(719, SPEC.what)]
    st.only_the_array_left()
    assert st.g.live_allocations() == live and st.g.pool._free[8] == [block]
    assert st.g.stats["from staged"] == 0                  # nothing counted as moved
    d.op_rc, d.calls[:] = 0, []
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0) is True
    assert d.calls[1][4] == 0x51                           # the stream went back


def test_an_interrupted_wait_copies_nothing_back_and_keeps_the_stream_out(accel_table,
                                                                         monkeypatch):
    def poll(stream):
        raise KeyboardInterrupt
    d = Driver(busy_polls=-1)                              # outlasts the spin
    st = Setup(accel_table, monkeypatch, d, poll=poll)
    block = st.pool_block()
    s = np.array([3.0])
    d.kernel = _add_to_the_scalar(1.0)
    with pytest.raises(KeyboardInterrupt):
        st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0)
    assert s[0] == 3.0
    st.only_the_array_left()
    assert st.g.pool._free[8] == [block]                   # freed the waiting way
    d.busy_polls, d.calls[:] = 0, []
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0) is True
    assert d.calls[1][4] == 0x52 and s[0] == 4.0          # stream 0 stays out


def reduce_from_four_threads(st, plan):
    """Four threads, each its own scalar, 200 regions each through kernels._present (the C
    ABI's way) on `plan`, the stand-in kernel adding 1: every sum right, nothing left."""
    st.d.kernel = _add_to_the_scalar(1.0)

    def launch(kargs):                                     # the Python path's launch
        ctypes.c_double.from_address(kargs[1]).value += 1.0
        return True
    sums, errors = [np.zeros(1) for _ in range(4)], []

    def work(s):
        try:
            rows = Setup.arrays(st, s)
            for _ in range(200):
                assert kernels._present(st.dev, rows, plan, launch) is True
        except BaseException as exc:                       # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(s,)) for s in sums]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and [s[0] for s in sums] == [200.0] * 4
    st.only_the_array_left()


def test_threads_reducing_into_their_own_scalars_each_get_every_update(accel_table,
                                                                     monkeypatch):
    """Two copier streams for four threads: some regions find none free and map their
    section in Python; the core makes the rest."""
    st = Setup(accel_table, monkeypatch, Driver())
    st.pool_block()
    reduce_from_four_threads(st, OmpLaunchPlan(SPEC, 0))
    assert st.g.stats["from staged ops"] > 0               # the core made some of them


AREA = 32                                          # each stand-in stream's section area


def _scratch_for(st, area=0):
    """A ReductionScratch of host arrays standing in for device blocks, one per stream:
    the buffer, the environment after it, then `area` bytes for a section."""
    from offload.plugins.accel_specs import ReductionScratch
    st.blocks = [np.full(64 + 16 + area, 0xAB, np.uint8) for _ in STREAMS]
    return ReductionScratch(tuple(b.ctypes.data + 64 for b in st.blocks),
                            tuple(b.ctypes.data for b in st.blocks), 64, area)


_STEPS = [("make the context current", "ctx_rc", 201), ("send the section", "op_rc", 1),
          ("zero the counters", "memset_rc", 2), ("wait", "done_rc", 700)]


@pytest.mark.parametrize("where, step, setting, code", [
    (where, *step) for where in ("pool", "area") for step in _STEPS
    if not (where == "area" and step[1] == "memset_rc")])     # (no memset there)
def test_a_failure_at_any_step_leaves_nothing_behind(accel_table, monkeypatch, where, step,
                                                     setting, code):
    """The driver failing at each step of the one pass (with a reduction's scratch, so
    every step runs): the error names the launch and its code, nothing is copied back,
    nothing stays in the table or marked, the stream goes back; a pooled block is freed
    the waiting way (queued work may still use it), a stream's area frees nothing; the
    next region runs, and its block goes back to the pool without a wait (its work is
    done)."""
    from offload.plugins.host import HostDevice
    waits = []
    monkeypatch.setattr(HostDevice, "_before_reuse_impl", lambda dev: waits.append(1))
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    waits.clear()
    scratch = _scratch_for(st, AREA if where == "area" else 0)
    s = np.array([3.0])
    live = st.g.live_allocations()
    d.kernel = _add_to_the_scalar(1.0)
    setattr(d, setting, code)
    with pytest.raises(offload.OffloadError, match=f"failed: {code}"):
        st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0, scratch)
    assert s[0] == 3.0, step
    st.only_the_array_left()
    assert st.g.live_allocations() == live and st.g.pool._free[8] == [block]
    assert waits == ([1] if where == "pool" else [])
    setattr(d, setting, 0)
    d.calls.clear()
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0, scratch) is True
    assert d.calls[1][-1] == 0x51 and s[0] == 4.0 and len(waits) <= 1


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), offload.OffloadError(
    offload.ErrorCode.OUT_OF_RESOURCES, "no pinned memory")], ids=["ctrl-c", "error"])
def test_a_bounce_that_cannot_be_had_leaves_sections_to_python(accel_table, monkeypatch, exc):
    """The copier's bounce raising an Exception (no pinned memory): the core maps no
    section, now or later (present_map's tuple, for Python to map); raising Ctrl-C: it
    propagates, nothing done, and the bounce is asked for again next time."""
    asked = []

    def bounce():
        asked.append(exc)
        raise exc
    d = Driver()
    st = Setup(accel_table, monkeypatch, d, bounce=bounce)
    st.pool_block()
    s = np.array([1.0])
    for _ in range(2):
        if isinstance(exc, KeyboardInterrupt):
            with pytest.raises(KeyboardInterrupt):
                st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0)
        else:
            assert type(st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0)) is tuple
        st.only_the_array_left()
    assert len(asked) == (2 if isinstance(exc, KeyboardInterrupt) else 1) and d.calls == []


def test_a_section_listed_twice_goes_to_the_general_rules(accel_table, monkeypatch):
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    block = st.pool_block()
    s = np.array([1.0])
    p = s.ctypes.data
    rows = [(ctypes.c_void_p * 2)(p, p), (ctypes.c_void_p * 2)(p, p),
            (ctypes.c_int64 * 2)(8, 8), (ctypes.c_int64 * 2)(0x23, 0x23)]
    arrays = (2, *(ctypes.addressof(r) for r in rows), 0)
    assert st.table.steps.launch_present_map(*arrays, SPEC, 0) is None
    assert d.calls == [] and len(st.table) == 1 and st.g.pool._free[8] == [block]


def test_who_maps_the_section_meanwhile_waits_for_the_region_and_finds_its_result(
        accel_table, monkeypatch):
    """Another thread mapping the scalar while the region runs (its entry made, its
    `ready` held) waits until the region ends, then maps it anew from the host value the
    region copied back."""
    d = Driver()
    st = Setup(accel_table, monkeypatch, d)
    st.pool_block()
    s = np.array([1.0])
    item = [MapItem(s.ctypes.data, 8, MapType.TO)]
    seen = []

    def other():
        st.table.target_data_begin(item)
        tgt = offload.omp_get_mapped_ptr(s, 0)
        seen.append(ctypes.c_double.from_address(tgt).value)
    thread = threading.Thread(target=other)
    add = _add_to_the_scalar(5.0)

    def kernel(params):
        thread.start()
        thread.join(0.2)                       # it waits: the region still holds it
        seen.append(thread.is_alive())
        add(params)
    d.kernel = kernel
    assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0) is True
    thread.join(10)
    assert seen == [True, 6.0] and s[0] == 6.0
    st.table.target_data_end([MapItem(s.ctypes.data, 8, MapType.FROM)])
    st.only_the_array_left()


def test_the_bounce_is_asked_for_once_and_only_when_a_section_first_needs_it(accel_table,
                                                                           monkeypatch):
    """Regions on mapped data alone never allocate the bounce buffers (4 MiB of pinned
    memory on CUDA); the first region with a section asks for them, once."""
    asked = []
    bounces = np.zeros(2 * LIMIT, np.uint8)

    def bounce():
        asked.append(1)
        return (bounces.ctypes.data, bounces.ctypes.data + LIMIT), LIMIT
    d = Driver()
    st = Setup(accel_table, monkeypatch, d, bounce=bounce)
    st.pool_block()
    p = st.a.ctypes.data
    rows = [(ctypes.c_void_p * 1)(p), (ctypes.c_void_p * 1)(p), (ctypes.c_int64 * 1)(0),
            (ctypes.c_int64 * 1)(PARAM)]
    present = (1, *(ctypes.addressof(r) for r in rows), 0)
    two = SPEC._replace(sizes=(8, 8))                     # the environment, the array
    for _ in range(3):
        assert st.table.steps.launch_present_map(*present, two, 0) is True
    assert asked == []
    s = np.array([1.0])
    for _ in range(3):
        assert st.table.steps.launch_present_map(*st.arrays(s), SPEC, 0) is True
    assert asked == [1] and st.g.stats["from staged ops"] == 3

