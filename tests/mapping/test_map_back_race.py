"""The last unmap keeps its entry until its copy back is done (LLVM's
offload/test/mapping/map_back_race.cpp; Mapping.cpp keeps the entry through
targetDataEnd's copy and erases it in postProcessingTargetDataEnd): a construct that maps
the same data meanwhile waits for the copy, then maps the host copy it brought back, never
the stale one. Run with and without the accelerator (OFFLOAD_ACCEL), for every way an
unmap copies back; tests/capi/map_back_race.c is the C ABI's side."""
import threading

import numpy as np
import pytest

import offload
from offload import _accel
from offload.testing import state

KIB4, MIB = 4096, 1 << 20


@pytest.fixture(scope="module")
def kernels():
    return offload.compile_c(
        "void add_one(int *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n"
        "void bump(int *a, long n) { __atomic_fetch_add(&a[0], 1, __ATOMIC_SEQ_CST);"
        " __atomic_fetch_add(&a[n - 1], 2, __ATOMIC_SEQ_CST); }\n")


def _copies_back_through(plugin, monkeypatch, fn):
    """Every copy back of the table goes through `fn(host, tgt, size)` first: the plugin's
    retrieve (the Python paths) and the compiled core's copy made outside the table's lock
    (its test hook), so that both can be held or made to fail. Returns the list of the
    paths that called `fn` ("python", "compiled")."""
    original, paths = plugin.data_retrieve, []

    def retrieve(device, hst, tgt, size, *rest):
        paths.append("python")
        fn(hst, tgt, size)
        return original(device, hst, tgt, size, *rest)

    def compiled(hst, tgt, size):
        paths.append("compiled")
        fn(hst, tgt, size)

    monkeypatch.setattr(plugin, "data_retrieve", retrieve)
    module = _accel.load()
    if module is not None:
        module.copy_back_hook(compiled)         # taken back by _no_copy_back_hook
    return paths


def _no_copy_back_hook():
    module = _accel.load()
    if module is not None:
        module.copy_back_hook(None)


def _expected_path(accel):
    return "compiled" if accel == "1" and _accel.load() is not None else "python"


@pytest.fixture(autouse=True)
def _hook_taken_back():
    """No test leaves the compiled core's copy-back hook set."""
    yield
    _no_copy_back_hook()


def _unmap_with(how, k, a):
    """One construct on `a` whose unmap copies `a` back (the one held in that copy)."""
    n = a.size
    if how == "region":
        offload.target(k.add_one, a, n, map=[offload.tofrom(a)])
    elif how == "nowait":
        offload.target(k.add_one, a, n, map=[offload.tofrom(a)], nowait=True).wait()
    elif how == "exit_from":
        offload.target_enter_data(offload.to(a))
        offload.target(k.add_one, a, n)
        offload.target_exit_data(offload.from_(a))
    elif how == "data":
        with offload.target_data(offload.tofrom(a)):
            offload.target(k.add_one, a, n)
    elif how == "implicit":
        offload.target(k.add_one, a, n)                 # mapped tofrom for the region
    elif how == "two_clauses":                          # `from` honoured at the last drop
        offload.target_enter_data(offload.to(a))
        offload.target_exit_data(offload.from_(a), offload.release(a))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("accel", ["0", "1"])
@pytest.mark.parametrize("how", ["region", "nowait", "exit_from", "data", "implicit",
                                 "two_clauses"])
def test_a_map_during_the_copy_back_waits_for_it(runtime, kernels, accel, how,
                                                 monkeypatch):
    """Thread A's copy back is held; thread B maps the same array meanwhile. B must not
    finish before A's copy is done, and the array ends with both increments."""
    m = runtime(OFFLOAD_ACCEL=accel)
    a = np.zeros(MIB // 4, dtype=np.int32)
    in_copy, go = threading.Event(), threading.Event()
    held = []

    def hold_first(hst, tgt, size):
        if not held and hst <= a.ctypes.data < hst + size:
            held.append(threading.get_ident())
            in_copy.set()
            assert go.wait(60), "the test never released the copy back"

    paths = _copies_back_through(m.plugins[0], monkeypatch, hold_first)
    errors = []

    def run(fn):
        def body():
            try:
                fn()
            except BaseException as exc:              # reported below
                errors.append(exc)
        t = threading.Thread(target=body)
        t.start()
        return t

    first = run(lambda: _unmap_with(how, kernels, a))
    assert in_copy.wait(60), "the unmap never copied back"
    second = run(lambda: offload.target(kernels.add_one, a, a.size,
                                        map=[offload.tofrom(a)]))
    second.join(0.3)
    still_waiting = second.is_alive()
    go.set()
    first.join(60)
    second.join(60)
    assert not errors, errors
    assert still_waiting, "a map during the copy back did not wait for it"
    if how == "region":                           # the held copy on the path expected
        assert paths[0] == _expected_path(accel), paths
    expected = 1 if how == "two_clauses" else 2
    assert (a == expected).all(), np.unique(a)
    assert state()["devices"][0] == {"mappings": 0, "allocations": 0}


@pytest.mark.parametrize("accel", ["0", "1"])
@pytest.mark.parametrize("nbytes", [KIB4, MIB])
def test_threads_adding_through_one_mapping_lose_nothing(runtime, kernels, accel, nbytes):
    """map_back_race.cpp's scenario through the Python API: 4 threads x 50 regions, each
    mapping the array tofrom and adding to its ends; every increment survives."""
    runtime(OFFLOAD_ACCEL=accel)
    a = np.zeros(nbytes // 4, dtype=np.int32)
    regions, threads = 50, 4

    def body():
        for _ in range(regions):
            offload.target(kernels.bump, a, a.size, map=[offload.tofrom(a)])

    for trial in range(5):
        a[:] = 0
        ts = [threading.Thread(target=body) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert (a[0], a[-1]) == (regions * threads, 2 * regions * threads), trial
    assert state()["devices"][0] == {"mappings": 0, "allocations": 0}


@pytest.mark.parametrize("accel", ["0", "1"])
@pytest.mark.parametrize("how", ["exit_from", "region"])
def test_an_interrupt_during_the_copy_back_leaves_no_entry_waiting(runtime, kernels, accel,
                                                                   how, monkeypatch):
    """A copy back that raises (a KeyboardInterrupt here) still takes its entry out and
    wakes those waiting: the next construct maps afresh instead of hanging."""
    m = runtime(OFFLOAD_ACCEL=accel)
    a = np.zeros(MIB // 4, dtype=np.int32)
    def interrupted(*args):
        raise KeyboardInterrupt

    if how == "exit_from":
        offload.target_enter_data(offload.to(a))
    paths = _copies_back_through(m.plugins[0], monkeypatch, interrupted)
    with pytest.raises(KeyboardInterrupt):
        if how == "exit_from":
            offload.target_exit_data(offload.from_(a))
        else:
            offload.target(kernels.add_one, a, a.size, map=[offload.tofrom(a)])
    monkeypatch.undo()
    _no_copy_back_hook()
    assert paths == [_expected_path(accel)]         # the one copy back, on its path
    assert state()["devices"][0]["mappings"] == 0
    done = threading.Thread(target=lambda: offload.target(kernels.add_one, a, a.size))
    done.start()
    done.join(60)
    assert not done.is_alive(), "a construct waited for an entry that was never released"
    assert (a == 1).all()
    assert state()["devices"][0] == {"mappings": 0, "allocations": 0}
