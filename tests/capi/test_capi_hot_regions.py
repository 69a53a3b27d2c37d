"""A kernel region that ran on mapped data in one step runs again from what was kept of it
(hot_regions): no device, kernel or plan lookup, while all of that is still true. Each
change that makes it untrue sends the next launch the general way: the default device
naming another device, a program registered, a profile or a kernel recording, an OMPT
tool, the region's data unmapped. Asserted by counting the paths, in-process through the
library's exports, each test twice: kept regions run by the library's C body through the
compiled core (offload/accel_c/hot.c, as in a C program, where libomp names the default
device) and by the Python path (kernels._run_kept); with the pure-Python core nothing is
kept."""
import ctypes
import os

import numpy as np
import pytest

import offload
from offload.capi import abi, devices, hot_regions, kernels
from tests.capi_support import LLVM_LIB, WHY, ours  # noqa: F401 - fixture
from tests.capi_support import count as _count

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")

PROGRAM = r'''
void enter(int *a, int *b, int n) {
#pragma omp target enter data map(to: a[0:n], b[0:n])
}
void leave(int *a, int *b, int n) {
#pragma omp target exit data map(from: a[0:n], b[0:n])
}
void bump(int *a, int *b, int k) {
#pragma omp target
  { b[k] = a[k] + 1; }
}
void inc(int *a, int n) {
#pragma omp target map(tofrom: a[0:n])
  for (int i = 0; i < n; i++) a[i] += 1;
}
void inc10(int *a) {
#pragma omp target map(tofrom: a[0:10])
  for (int i = 0; i < 10; i++) a[i] += 1;
}
void enter10(int *a) {
#pragma omp target enter data map(to: a[0:10])
}
void from10(int *a) {
#pragma omp target update from(a[0:10])
}
void exit10(int *a) {
#pragma omp target exit data map(from: a[0:10])
}
long dot(int *a, int *b, int n) {
  long sum = 0;
#pragma omp target teams distribute parallel for map(tofrom: sum) reduction(+: sum)
  for (int i = 0; i < n; i++) sum += (long)a[i] * (b[i] + 1);
  return sum;
}
'''


class Calls(dict):
    """The paths counted: `hot` a kept region run (by the core: also `core`), `general`
    the lookups of _on_present, `launch` the device's omp_launch."""

    def __init__(self, mode, core_runs):
        super().__init__()
        self.mode, self._core_runs, self._core_start = mode, core_runs, core_runs()

    def get(self, key, default=None):
        core = self._core_runs() - self._core_start
        if key == "core":
            return core or default
        if key == "hot" and core:
            return super().get(key, 0) + core
        return super().get(key, default)

    def __getitem__(self, key):
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got

    def __repr__(self):
        return repr({k: self.get(k) for k in ("hot", "core", "general", "launch")})

SAY = r'''
#include <unistd.h>
void say(void) {
#pragma omp target
  { write(1, "ran\n", 4); }
}
'''


@pytest.fixture(params=["core", "python"])
def two(request, runtime, monkeypatch, ours):  # noqa: F811 - the fixture above
    """(calls, set_default, compiled): two host devices, the library's exports in this
    process, the paths counted (Calls). `core`: the library reads the default device
    from libomp, as in a C program, so kept regions run from the compiled core."""
    runtime(OFFLOAD_HOST_NUM_DEVICES=2)
    ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(ours, abi.SONAME), mode=ctypes.RTLD_GLOBAL)
    assert lib.omp_get_num_devices() == 2             # (the library's Python side bound)
    compiled = offload.runtime.current().device(0).table.steps.present_map is not None
    core = hot_regions._compiled
    if request.param == "core":
        if not compiled or core is None:
            pytest.skip("no compiled core in this mode: the library keeps nothing in C")
        monkeypatch.setattr(devices, "libomp", devices.ffi.dlopen(None))
    else:
        monkeypatch.setattr(devices, "libomp", None)
    hot_regions.forget()
    calls = Calls(request.param, core.hot_ran if core is not None else lambda: 0)
    _count(monkeypatch, calls, kernels, "_run_kept", "hot")
    _count(monkeypatch, calls, kernels, "_on_present", "general")
    gen = offload.runtime.current().device(0).generic
    _count(monkeypatch, calls, gen, "omp_launch", "launch")
    yield calls, _set_default, compiled
    _set_default(0)
    hot_regions.forget()


def _set_default(n):
    """The default device of this thread, as the exports read it (libomp's, when the
    library found libomp loaded, else the runtime's own)."""
    if devices.libomp is not None:
        ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5")).omp_set_default_device(n)
    offload.omp.omp_set_default_device(n)


def _entered():
    """(the program, a, b) with a = 0..99 and b = 0 mapped on the default device."""
    m = offload.compile_openmp(PROGRAM)
    a, b = np.arange(100, dtype=np.int32), np.zeros(100, dtype=np.int32)
    m.enter(a, b, 100)
    return m, a, b


def test_a_region_run_again_takes_what_was_kept(two):
    """The second and later launches of a region on mapped data run from what the first
    kept (compiled core); the results are those of the general way."""
    calls, _, compiled = two
    m, a, b = _entered()
    for k in range(4):
        m.bump(a, b, k)
    m.leave(a, b, 100)
    assert list(b[:5]) == [1, 2, 3, 4, 0]
    if compiled:
        assert calls.get("general") == 1 and calls.get("hot") == 3, calls
        assert calls.get("launch") == 1, calls             # then called directly
        assert calls.get("core") == (3 if calls.mode == "core" else None), calls
    else:
        assert "general" in calls and "hot" not in calls, calls


def test_an_empty_region_run_again_takes_what_was_kept(two, capfd):
    """A region with no map list is kept when the core can run it (the library's C tries
    a kept region first), so its later launches run from the core; each launch runs (its
    kernel prints a line)."""
    calls, _, compiled = two
    m = offload.compile_openmp(SAY)
    capfd.readouterr()
    for _ in range(4):
        m.say()
    assert capfd.readouterr().out == "ran\n" * 4
    assert calls.get("launch") == (1 if calls.mode == "core" else 4), calls
    assert calls.get("core") == (3 if calls.mode == "core" else None), calls


def test_a_reduction_run_again_maps_its_scalar_and_takes_what_was_kept(two):
    """A Dot-shaped region (its scalar mapped first, the arrays already mapped) is kept
    too: later launches map the scalar in fewer steps and run the rest from what was
    kept; each sum is right, and nothing but the arrays stays mapped."""
    calls, _, compiled = two
    m, a, b = _entered()
    table = offload.runtime.current().device(0).table
    lengths = (100, 100, 100, 50)              # another trip count: another launch
    assert [m.dot(a, b, n) for n in lengths] == [sum(range(n)) for n in lengths]
    assert len(table) == 2
    m.leave(a, b, 100)
    if compiled:
        assert calls.get("general") == 2 and calls.get("hot") == 2, calls
        assert calls.get("core") == (2 if calls.mode == "core" else None), calls
    else:
        assert "hot" not in calls, calls


@pytest.mark.parametrize("region", ["inc10", "inc"])
def test_a_section_region_run_again_takes_what_was_kept(two, region):
    """`map(tofrom: a[0:10])` alone (kernel_one's list) or beside its length (kernel_many's)
    is kept on the host once run: later launches map and unmap the section in the core
    around the call (copied in and back each time), or, with the array mapped by `enter
    data`, run on the mapped copy."""
    calls, _, compiled = two
    m, a, b = _entered()
    run = (lambda x: m.inc10(x)) if region == "inc10" else (lambda x: m.inc(x, 10))
    c = np.arange(10, dtype=np.int32)
    for _ in range(3):
        run(c)                                         # mapped nowhere: in and out
    assert list(c) == list(range(3, 13))
    run(a)                                             # a is mapped: the device copy
    run(a)
    assert a[0] == 0                                   # the host's untouched till exit
    m.leave(a, b, 100)
    assert list(a[:3]) == [2, 3, 4] and a[10] == 10
    assert len(offload.runtime.current().device(0).table) == 0
    if calls.mode == "core":
        assert calls.get("core") == 4, calls           # all but the first (one key)


def test_data_constructs_of_one_section_run_again_from_the_core(two):
    """`enter data`, `update` and `exit data` of one plain section: kept per device once
    data_one ran one, the next ones run by the core (in core mode); the counts and
    copies are those of the general way."""
    calls, _, compiled = two
    m = offload.compile_openmp(PROGRAM)
    core = hot_regions._compiled
    before = core.hot_data_ran() if core is not None else 0
    c = np.arange(10, dtype=np.int32)
    m.enter10(c)
    m.enter10(c)                                   # a second reference
    m.inc10(c)                                     # the device copy: 1..10
    assert c[0] == 0
    m.from10(c)
    assert list(c[:3]) == [1, 2, 3]
    c[:] = 0
    m.exit10(c)                                    # one reference left: no copy back
    assert not c.any()
    m.exit10(c)                                    # the last: copied back
    assert list(c[:3]) == [1, 2, 3]
    assert len(offload.runtime.current().device(0).table) == 0
    ran = (core.hot_data_ran() - before) if core is not None else 0
    assert ran == (4 if calls.mode == "core" else 0), ran


def test_another_default_device_is_not_the_kept_one(two):
    """omp_set_default_device(1) after a region was kept on device 0: the next launch
    runs on device 1 (a and b not mapped there: the host arrays themselves), not on device
    0's copies."""
    calls, set_default, compiled = two
    m, a, b = _entered()
    m.bump(a, b, 0)
    m.bump(a, b, 1)
    set_default(1)
    m.bump(a, b, 2)
    assert list(b[:3]) == [0, 0, 3]            # device 1 wrote the host array itself
    set_default(0)
    m.bump(a, b, 3)            # device 0 again: kept afresh (Python's key names -1), or
    m.leave(a, b, 100)         # run as kept (the core's key names device 0)
    assert list(b[:5]) == [1, 2, 0, 4, 0]      # device 0's copy back
    if compiled and calls.mode == "core":
        assert calls.get("general") == 2 and calls.get("core") == 2, calls
    elif compiled:
        assert calls.get("general") == 3 and calls.get("hot") == 1, calls


@pytest.mark.parametrize("change", ["register", "recording", "profile", "ompt"])
def test_what_makes_a_kept_region_untrue_sends_it_the_general_way(two, monkeypatch,
                                                                   tmp_path, change):
    """After a region was kept: a program registered, a kernel recording or a profile
    watching the device, an OMPT tool listening: the next launch takes the general way
    (omp_launch runs it, so a watcher sees it) and the result is the same."""
    calls, _, compiled = two
    if not compiled:
        pytest.skip("no compiled core in this mode: nothing is kept")
    m, a, b = _entered()
    m.bump(a, b, 0)
    m.bump(a, b, 1)
    assert calls.get("general") == 1 and calls.get("launch") == 1 and calls["hot"] == 1
    gen = offload.runtime.current().device(0).generic
    seen = []
    if change == "register":
        offload.compile_openmp(PROGRAM.replace("bump", f"other_{calls.mode}"))   # registers
    elif change == "recording":
        monkeypatch.setattr(gen, "arena", _Recording(seen))
    elif change == "profile":
        p = offload.profile.Profile(str(tmp_path / "profile.json"), 0)
        monkeypatch.setattr(offload.profile, "active", p)
    else:
        from offload.capi import ompt
        monkeypatch.setattr(ompt, "listening", True)
    m.bump(a, b, 2)
    assert calls["hot"] == 1, calls                  # forgotten: not run from the kept
    # the general way: _on_present's lookups (not while OMPT listens: the export's own
    # path), omp_launch running the kernel
    assert calls["general"] == (1 if change == "ompt" else 2), calls
    assert calls["launch"] == 2, calls
    if change == "recording":
        assert seen == ["after"], seen
    elif change == "profile":
        assert p._totals["Kernel Target"][0] == 1
    monkeypatch.undo()


def test_a_kept_region_whose_data_went_runs_the_general_way(two):
    """The region's arrays unmapped after it was kept: the kept run finds its list not on
    mapped data and does nothing; the general rules run it on the host pointers."""
    calls, _, compiled = two
    m, a, b = _entered()
    m.bump(a, b, 0)
    m.leave(a, b, 100)
    m.bump(a, b, 1)                        # not mapped: the host arrays (host device)
    assert list(b[:3]) == [1, 2, 0]
    assert len(offload.runtime.current().device(0).table) == 0
    if compiled:                           # the kept run found nothing to run on
        assert calls.get("general") == 2 and calls.get("hot") == 1, calls


class _Recording:
    """A kernel recording's arena as omp_launch sees it: what it was told, in `seen`."""

    used = 0

    def __init__(self, seen):
        self.seen = seen

    def before_launch(self, name, image):
        pass

    def after_launch(self, *args):
        self.seen.append("after")


def test_kept_regions_under_threads_while_their_data_comes_and_goes(two):
    """Four threads launch a kept region over and over while the main thread maps and
    unmaps its arrays: each launch runs on the mapped copies (copied back at the unmap,
    which waits for it) or, unmapped, on the host arrays; never on freed memory. Every
    element ends a[k] + 1 and nothing stays mapped."""
    import threading
    calls, _, compiled = two
    m = offload.compile_openmp(PROGRAM)
    a, b = np.arange(64, dtype=np.int32), np.zeros(64, dtype=np.int32)
    failures, stop = [], threading.Event()
    m.enter(a, b, 64)
    for k in range(4):
        m.bump(a, b, k)                       # kept once, then run from what was kept
    m.leave(a, b, 64)
    assert calls.get("hot") == (3 if compiled else None), calls

    def launch(k):
        try:
            while not stop.is_set():
                m.bump(a, b, k)
        except BaseException as exc:          # noqa: B036 - reported below
            failures.append(exc)
    threads = [threading.Thread(target=launch, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for _ in range(200):
        m.enter(a, b, 64)
        m.leave(a, b, 64)
    stop.set()
    for t in threads:
        t.join()
    assert not failures, failures
    assert list(b[:4]) == [1, 2, 3, 4] and not b[4:].any()
    assert len(offload.runtime.current().device(0).table) == 0
