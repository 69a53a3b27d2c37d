"""One region pipeline (mapping/region.py): every region entry point maps, keeps its entries
in use, unmaps and lets go through a Region, and a failure at any step leaves the table as
it was (no entry, no busy mark, no pointer mapping)."""
import ctypes
import pathlib
import re

import numpy as np
import pytest

import offload
from offload.mapping.region import Region
from tests.single_range_support import SRC

ROOT = pathlib.Path(__file__).resolve().parents[2] / "offload"


class _Table:
    """A table that records what a Region asks of it."""

    observed = False

    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail
        self.marked = 0
        self.steps = self                     # its single-range steps are its methods

    def _step(self, name, *args):
        self.calls.append((name, *args))
        if self.fail == name:
            raise RuntimeError(f"injected: {name}")

    def target_data_begin(self, items, queue, busy):
        self._step("begin", len(items))
        busy.extend(f"e{i}" for i in range(len(items)))
        return [100 + i for i in range(len(items))]

    def target_data_end(self, items, queue, copy_back, own):
        self._step("end", copy_back, list(own))

    def begin_single_range(self, p, n, t, owner, read_only, busy):
        self._step("begin1", p)
        busy.append("one")
        return 7

    def end_single_range(self, p, n, t, owner, e, copy_back=True):
        self._step("end1", e, copy_back)

    def release_busy(self, entries):
        self._step("release", list(entries))


@pytest.mark.parametrize("fail", [None, "launch", "end", "release"])
def test_a_region_unmaps_and_lets_go_whatever_fails(fail):
    table = _Table(fail if fail in ("end", "release") else None)
    with pytest.raises(RuntimeError) if fail else _nothing():
        with Region(table) as region:
            region.hold(["found", None])
            assert region.map([1, 2]) == [100, 101]
            if fail == "launch":
                raise RuntimeError("injected: launch")
    back = fail is None or fail in ("end", "release")
    assert table.calls == [("begin", 2), ("end", back, ["found", "e0", "e1"]),
                           ("release", ["found", "e0", "e1"])]
    assert region.marked == []


def test_a_failed_map_releases_what_the_region_held_and_unmaps_nothing():
    table = _Table("begin")
    with pytest.raises(RuntimeError, match="injected: begin"):
        with Region(table) as region:
            region.hold(["found"])
            region.map([1])
    assert table.calls == [("begin", 1), ("release", ["found"])]


@pytest.mark.parametrize("launch_fails", [False, True])
def test_a_single_range_region_lets_its_entry_go_through_its_unmap(launch_fails):
    table = _Table()
    seen = []

    def launch(tgt):
        seen.append(tgt)
        if launch_fails:
            raise RuntimeError("launch")
    with pytest.raises(RuntimeError) if launch_fails else _nothing():
        Region.single_range(table, 0x1000, 8, 3, None, False, launch)
    assert seen == [7]
    assert table.calls == [("begin1", 0x1000), ("end1", "one", not launch_fails)]


@pytest.mark.parametrize("launch_fails", [False, True])
def test_a_region_on_marked_entries_lets_them_go(launch_fails):
    table = _Table()

    def launch():
        if launch_fails:
            raise RuntimeError("launch")
    with pytest.raises(RuntimeError) if launch_fails else _nothing():
        Region.on_marked(table, ["a", "b"], launch)
    assert table.calls == [("release", ["a", "b"])]


def test_a_region_maps_once():
    region = Region(_Table())
    region.map([1])
    with pytest.raises(RuntimeError, match="maps once"):
        region.map_by(lambda busy: None, lambda result, copy_back, own: None)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- every entry point, with a launch that fails ------------------------------------------------
def _failing_launch(monkeypatch, dev):
    def launch(*args, **kw):
        raise offload.OffloadError(offload.ErrorCode.BACKEND_FAILURE, "injected launch failure")
    monkeypatch.setattr(dev.generic, "launch", launch)


@pytest.mark.parametrize("shape", ["single clause", "two clauses", "implicit", "on present",
                                   "on present, a clause too"])
def test_a_failed_launch_leaves_the_table_as_it_was(runtime, monkeypatch, shape):
    runtime()
    k = offload.compile_c(SRC)
    a = np.arange(32, dtype=np.int32)
    b = np.zeros(8, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    maps = {"single clause": [offload.tofrom(a)],
            "two clauses": [offload.to(a), offload.from_(b)],
            "implicit": [], "on present": [], "on present, a clause too": [offload.to(b)]}[shape]
    present = shape.startswith("on present")
    if present:
        offload.target_enter_data(offload.to(a))
    before = [(e.hst_begin, e.dyn, e.busy) for e in dev.table.entries()]
    _failing_launch(monkeypatch, dev)
    a[:] = 5
    with pytest.raises(offload.OffloadError, match="injected launch failure"):
        offload.target(k.inc, a, a.size, map=maps)
    assert [(e.hst_begin, e.dyn, e.busy) for e in dev.table.entries()] == before
    assert (a == 5).all()                              # nothing copied back
    if present:
        offload.target_exit_data(offload.release(a))
    assert len(dev.table) == 0


def test_a_failed_c_abi_launch_gives_back_its_attached_pointer(runtime, monkeypatch):
    """A region whose map list attaches a pointer (PTR_AND_OBJ) maps the pointer's own 8
    bytes for the region; a launch that fails gives them back with the rest (they stayed
    mapped before the region pipeline)."""
    from offload.capi import kernels, maps
    runtime()
    dev = offload.runtime.current().device(0)
    data = np.arange(16, dtype=np.int64)
    ptr = ctypes.c_uint64(data.ctypes.data)
    base = ctypes.addressof(ptr)
    arg = maps.Arg(base, data.ctypes.data, data.nbytes, 0x3 | 0x10, None, 0)
    monkeypatch.setattr(kernels, "_kernel", lambda d, host_ptr: (None, "k"))

    def failing(*args, **kw):
        raise offload.OffloadError(offload.ErrorCode.BACKEND_FAILURE, "injected launch failure")
    monkeypatch.setattr(kernels, "_run_with_args", failing)
    with pytest.raises(offload.OffloadError, match="injected launch failure"):
        kernels._launch(dev, 0x1234, ([arg], [arg]), None)
    assert dev.table.entries() == []


# ---- the entry points themselves ---------------------------------------------------------------
_BY_HAND = re.compile(r"\b(target_data_begin|target_data_end|begin_single_range|"
                      r"end_single_range|release_busy)\(")


def test_region_entry_points_arrange_no_marks_by_hand():
    """target's regions and the C ABI's kernels reach the table's map, unmap and marks
    only through a Region (the nowait Stream form hands its kept marks to release_busy
    once the stream ran, by reference, not by call)."""
    found = []
    for rel in ("target.py", "capi/kernels.py"):
        for n, line in enumerate((ROOT / rel).read_text().splitlines(), 1):
            if _BY_HAND.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []
    for rel in ("target.py", "capi/kernels.py"):
        assert "Region(" in (ROOT / rel).read_text()
