"""offload.stats (issue 29): bytes by route, so a test can say which path a copy took and
a change that drops a fast path fails without any timing. On the pitched recording
double (staging from 256 KiB, like a GPU plugin): every entry sends a large unpinned
buffer through staging and a pinned one directly; on the host plugin copies are memcpy."""
import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError

N = 1 << 20                           # past the recording double's 256 KiB staging threshold


def _moves(fn, device=0, what=None):
    """What `fn` moved on `device` by direction and route: bytes, or with
    what="operations_by_direction" the operations."""
    before = offload.stats(device)
    fn()
    after = offload.stats(device)
    if what is not None:
        before, after = before[what], after[what]
    return {way: {r: after[way][r] - before[way][r] for r in after[way]}
            for way in ("to_device", "from_device")}


def _entries(k):
    """Each entry point moving the N-byte array `a` to the device and back."""
    def data_region(a):
        with offload.target_data(offload.tofrom(a), device=0):
            pass

    def region(a):
        offload.target(k.add_one, a.view(np.int32), 0, 0, device=0,
                       map=[offload.tofrom(a)])

    def enter_exit(a):
        offload.target_enter_data(offload.to(a), device=0)
        offload.target_exit_data(offload.from_(a), device=0)

    def updates(a):
        offload.target_enter_data(offload.alloc(a), device=0)
        offload.target_update(to=[a], device=0)
        offload.target_update(from_=[a], device=0)
        offload.target_exit_data(offload.release(a), device=0)

    def nowait(a):
        offload.target_enter_data(offload.to(a), device=0, nowait=True).wait()
        offload.target_exit_data(offload.from_(a), device=0, nowait=True).wait()

    def memcpy(a):
        d = offload.omp_target_alloc(a.nbytes, 0)
        host = offload.omp_get_initial_device()
        assert offload.omp_target_memcpy(d, a, a.nbytes, 0, 0, 0, host) == 0
        assert offload.omp_target_memcpy(a, d, a.nbytes, 0, 0, host, 0) == 0
        offload.omp_target_free(d, 0)

    def stream(a):
        with offload.stream(0) as q:
            offload.target(k.add_one, a.view(np.int32), 0, 0, device=0,
                           map=[offload.tofrom(a)], stream=q)
    return [data_region, region, enter_exit, updates, nowait, memcpy, stream]


@pytest.mark.parametrize("entry", range(7))
def test_a_large_unpinned_copy_is_staged_and_a_pinned_one_direct(runtime, add_one, entry):
    runtime(OFFLOAD_PLUGINS="pitched")
    fn = _entries(add_one)[entry]
    a = np.zeros(N, np.uint8)
    got = _moves(lambda: fn(a))
    assert got["to_device"]["staged"] == N and got["from_device"]["staged"] == N, (fn, got)
    assert got["to_device"]["pinned"] == got["from_device"]["pinned"] == 0
    with offload.locked(a, device=0):
        got = _moves(lambda: fn(a))
    assert got["to_device"]["pinned"] == N and got["from_device"]["pinned"] == N, (fn, got)
    assert got["to_device"]["staged"] == got["from_device"]["staged"] == 0



@pytest.mark.parametrize("entry", range(7))
def test_small_retrieves_are_staged_where_the_plugin_says(runtime, add_one, entry):
    """A plugin with stage_small_retrieves (CUDA) sends an unpinned copy from the device
    below the staging threshold through one staging buffer, from every entry; copies to
    the device stay one plain copy, and pinned ones go direct."""
    runtime(OFFLOAD_PLUGINS="bouncing")
    fn = _entries(add_one)[entry]
    a = np.zeros(4096, np.uint8)
    ops = _moves(lambda: fn(a), what="operations_by_direction")
    assert ops["from_device"]["staged"] == sum(ops["from_device"].values()) == 1, (fn, ops)
    assert ops["to_device"]["staged"] == 0 and sum(ops["to_device"].values()) == 1, (fn, ops)
    with offload.locked(a, device=0):
        got = _moves(lambda: fn(a))
    assert got["from_device"]["pinned"] == got["to_device"]["pinned"] == a.nbytes, (fn, got)
    assert got["from_device"]["staged"] == 0


def test_a_small_staged_retrieve_brings_the_device_values(runtime):
    runtime(OFFLOAD_PLUGINS="bouncing")
    a = np.arange(1000, dtype=np.int64)
    offload.target_enter_data(offload.to(a), device=0)
    a[:] = -1
    offload.target_update(from_=[a[10:20]], device=0)
    assert (a[10:20] == np.arange(10, 20)).all() and (a[:10] == -1).all() and \
        (a[20:] == -1).all()
    offload.target_exit_data(offload.from_(a), device=0)
    assert (a == np.arange(1000)).all()



def test_a_small_strided_retrieve_is_staged_too(runtime):
    """The 2-D path keeps the same rule: a small unpinned block from the device is packed
    through staging where the plugin stages small retrieves, and lands where it should."""
    runtime(OFFLOAD_PLUGINS="bouncing")
    a = np.arange(64 * 64, dtype=np.int32).reshape(64, 64)
    want = a.copy()
    offload.target_enter_data(offload.to(a), device=0)
    a[:] = -1
    got = _moves(lambda: offload.target_update(from_=[a[:, 8:24]], device=0))
    assert got["from_device"]["staged"] == 64 * 16 * 4, got
    assert (a[:, 8:24] == want[:, 8:24]).all() and (a[:, :8] == -1).all()
    offload.target_exit_data(offload.release(a), device=0)

@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_small_staged_retrieve_writes_nothing(runtime, exc):
    """A small staged retrieve that fails in its DMA leaves the host memory as it was and
    its buffer unused after (a DMA may still land in it); the next one is right."""
    runtime(OFFLOAD_PLUGINS="bouncing")
    dev = offload.runtime.current().manager.get_device(0).generic
    a = np.arange(100, dtype=np.int64)
    offload.target_enter_data(offload.to(a), device=0)
    a[:] = -1
    real = type(dev)._retrieve_impl

    def fails(self, host, tgt, size, queue, pinned):
        real(self, host, tgt, size, queue, pinned)
        raise exc("injected")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(dev), "_retrieve_impl", fails)
        with pytest.raises(exc):
            offload.target_update(from_=[a], device=0)
    assert (a == -1).all()
    free_before = [list(s) for s in dev.staging._free]
    offload.target_update(from_=[a], device=0)
    assert (a == np.arange(100)).all()
    assert all(lanes not in free_before for lanes in dev.staging._free if lanes)
    offload.target_exit_data(offload.release(a), device=0)

def test_host_plugin_copies_are_memcpy(rt, add_one):
    a = np.zeros(N, np.uint8)
    for fn in _entries(add_one):
        got = _moves(lambda fn=fn: fn(a))
        assert got["to_device"]["host"] == N and got["from_device"]["host"] == N, (fn, got)
        assert all(got[w][r] == 0 for w in got for r in ("pinned", "staged", "pageable"))


def test_stats_shape_and_refusals(rt):
    for d in (0, 1):                                              # both devices in use
        offload.omp_target_free(offload.omp_target_alloc(8, d), d)
    assert set(offload.stats()) == {0, 1}
    one = offload.stats(0)
    assert set(one) == {"bytes", "to_device", "from_device", "allocations", "operations",
                        "operations_by_direction", "pool_hits", "pins"}
    assert set(one["operations"]) == set(one["bytes"])
    assert set(one["pins"]) == {"entries", "bytes"}
    assert set(one["bytes"]) == {"pinned", "staged", "pageable", "host", "peer"}
    assert all(type(v) is int for v in one["bytes"].values())
    with pytest.raises(OffloadError) as e:
        offload.stats(offload.omp_get_initial_device())
    assert e.value.code is ErrorCode.INVALID_VALUE


@pytest.mark.parametrize("entry", range(7))
def test_operations_are_counted_by_route(runtime, add_one, entry):
    """Each entry's copies counted as operations on the route their bytes took: the
    N-byte staged copy is one operation each way, a pinned one one direct operation."""
    runtime(OFFLOAD_PLUGINS="pitched")
    fn = _entries(add_one)[entry]
    a = np.zeros(N, np.uint8)
    ops = _moves(lambda: fn(a), what="operations_by_direction")
    assert ops["to_device"]["staged"] == ops["from_device"]["staged"] == 1, (fn, ops)
    assert ops["to_device"]["pinned"] == ops["from_device"]["pinned"] == 0
    with offload.locked(a, device=0):
        ops = _moves(lambda: fn(a), what="operations_by_direction")
    assert ops["to_device"]["pinned"] == ops["from_device"]["pinned"] == 1, (fn, ops)
    assert ops["to_device"]["staged"] == ops["from_device"]["staged"] == 0


def test_host_plugin_operations_and_totals_agree(rt):
    a = np.zeros(4096, np.uint8)
    before = offload.stats(0)
    for _ in range(3):
        with offload.target_data(offload.tofrom(a), device=0):
            pass
    after = offload.stats(0)
    assert after["operations"]["host"] - before["operations"]["host"] == 6
    assert after["bytes"]["host"] - before["bytes"]["host"] == 6 * a.nbytes
    ways = after["operations_by_direction"]
    assert after["operations"]["host"] == ways["to_device"]["host"] + ways["from_device"]["host"]


def test_pool_hits_count_reused_device_memory(rt):
    """A freed block goes to the device pool; the next map of the same size takes it
    (through the C fast path as through the Python one) and counts a pool hit."""
    a = np.zeros(4096, np.uint8)
    with offload.target_data(offload.tofrom(a), device=0):
        pass
    hits = offload.stats(0)["pool_hits"]
    for i in range(3):
        with offload.target_data(offload.tofrom(a), device=0):
            pass
        assert offload.stats(0)["pool_hits"] == hits + i + 1
    d = offload.omp_target_alloc(a.nbytes, 0)       # the same size again, another entry
    assert offload.stats(0)["pool_hits"] == hits + 4
    offload.omp_target_free(d, 0)


def test_pins_are_the_ranges_this_device_uses(rt):
    a = np.zeros(1 << 16, np.uint8)
    assert offload.stats(0)["pins"] == {"entries": 0, "bytes": 0}
    with offload.locked(a, device=0):
        assert offload.stats(0)["pins"] == {"entries": 1, "bytes": a.nbytes}
        offload.omp_target_free(offload.omp_target_alloc(8, 1), 1)   # device 1 in use
        assert offload.stats(1)["pins"] == {"entries": 0, "bytes": 0}  # pinned for 0 only
    assert offload.stats(0)["pins"] == {"entries": 0, "bytes": 0}


def test_offload_stats_file_and_offload_info(tmp_path):
    """OFFLOAD_STATS=path: a program's counters written at its exit; `offload-info --stats
    path` prints them (and refuses, saying why, a file that is not one)."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    env = dict(os.environ, OFFLOAD_PLUGINS="host", OFFLOAD_CACHE_DIR=str(tmp_path / "c"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               OFFLOAD_STATS=str(tmp_path / "s.json"))
    code = ("import numpy as np, offload\n"
            "a = np.zeros(4096, np.uint8)\n"
            "with offload.target_data(offload.tofrom(a), device=0):\n    pass\n")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "s.json").read_text())
    dev = data["devices"]["0"]
    assert dev["plugin"] == "host" and dev["bytes"]["host"] == 8192
    assert dev["operations"]["host"] == 2
    env.pop("OFFLOAD_STATS")
    res = subprocess.run([sys.executable, "-m", "offload.cli", "--stats",
                          str(tmp_path / "s.json")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "device 0 (host)" in res.stdout and " host " in res.stdout, res.stdout
    row = [ln.split() for ln in res.stdout.splitlines() if ln.split()[:1] == ["host"]]
    assert row == [["host", "4096", "4096", "2"]], res.stdout
    (tmp_path / "bad.json").write_text("[1, 2]")
    res = subprocess.run([sys.executable, "-m", "offload.cli", "--stats",
                          str(tmp_path / "bad.json")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1 and "not a file OFFLOAD_STATS wrote" in res.stderr


def test_offload_stats_from_a_c_program(tmp_path):
    import json

    from tests.capi_support import LLVM_LIB, WHY, run
    if WHY:
        pytest.skip(WHY)
    from tests.capi_support import CLANG, HERE, TARGET
    import os
    import subprocess
    exe = tmp_path / "prog"
    subprocess.run([CLANG, *TARGET, "-O1", os.path.join(HERE, "capi", "profile_events.c"),
                    "-o", str(exe)], check=True, capture_output=True)
    from offload.capi import libdir
    rc, out, err = run(str(exe), f"{libdir()}:{LLVM_LIB}", OFFLOAD_STATS=str(tmp_path / "s"))
    assert (rc, out) == (0, "1000\n"), err
    dev = json.loads((tmp_path / "s").read_text())["devices"]["0"]
    assert dev["to_device"]["host"] == 8000 and dev["from_device"]["host"] == 8000, dev
