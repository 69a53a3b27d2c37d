"""The profile's device clock (issue 31 item 1): copies and kernels timed by timing events
on their device queue (ROCr's packet timestamps on the HSA simulator, CUDA events on a
GPU), placed on the host's timeline; each copy names the map clause behind it."""
import json

import numpy as np
import pytest

import offload
from tests.amdgpu_support import blocks


def _lanes(path):
    data = json.loads(path.read_text())
    return [e for e in data["traceEvents"] if e.get("cat") == "device"]


def test_hsa_copies_and_kernels_timed_by_packet_timestamps(runtime, sim, code_objects,  # noqa: F811
                                                           tmp_path):
    path = tmp_path / "p.json"
    runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path,
            LIBOMPTARGET_PROFILE=str(path), LIBOMPTARGET_PROFILE_GRANULARITY="0")
    k = offload.load_image(code_objects["gfx90a"])
    a = np.zeros(4096, np.int32)
    asked = sim.hsa_sim_calls(b"hsa_amd_profiling_get_dispatch_time")
    offload.target(k.add_one, a, 0, a.size, map=[offload.tofrom(a)], device=0,
                   **blocks(a.size))
    s = offload.stream(0)
    with offload.target_data(offload.to(a, name="a"), device=0):
        offload.target(k.add_one, a, 0, a.size, device=0, stream=s, **blocks(a.size))
        offload.target_update(from_=[a], device=0, stream=s)
        s.synchronize()
    s.close()
    asked = sim.hsa_sim_calls(b"hsa_amd_profiling_get_dispatch_time") - asked
    offload.shutdown()
    assert (a == 2).all()
    events = _lanes(path)
    names = [e["name"] for e in events]
    assert names == ["HostToDev", "Kernel Target", "DevToHost", "HostToDev", "Kernel Target",
                     "DevToHost"], names
    assert {e["args"]["clock"] for e in events} == {"device"}
    assert asked >= 2 * len(events), asked          # both ends of every event
    for e in events:
        assert e["dur"] >= 0 and e["ts"] > 0, e
    first = events[:3]                       # one synchronous region: in order on the device
    assert first[0]["ts"] + first[0]["dur"] <= first[1]["ts"] + 1
    assert first[1]["ts"] + first[1]["dur"] <= first[2]["ts"] + 1
    clauses = [e["args"].get("clause") for e in events if e["name"] != "Kernel Target"]
    assert clauses[0].startswith("map(tofrom: ") and clauses[1].startswith("map(tofrom: ")
    assert clauses[2:] == ["map(to: a)", "update from(a)"], clauses


def test_host_plugin_takes_the_host_clock_and_names_clauses(runtime, add_one, tmp_path):
    path = tmp_path / "p.json"
    runtime(LIBOMPTARGET_PROFILE=str(path), LIBOMPTARGET_PROFILE_GRANULARITY="0")
    a = np.zeros(1000, np.int32)
    offload.target_enter_data(offload.to(a, name="a"), device=0)
    offload.target_update(to=[a], device=0)
    offload.target(add_one.add_one, a, 0, a.size,
                   map=[offload.tofrom(a, always=True, name="a")], device=0)
    offload.target_exit_data(offload.from_(a, name="a"), device=0)
    offload.shutdown()
    events = _lanes(path)
    assert {e["args"]["clock"] for e in events} == {"host"}
    assert [(e["name"], e["args"].get("clause")) for e in events] == [
        ("HostToDev", "map(to: a)"), ("HostToDev", "update to(a)"),
        ("HostToDev", "map(always, tofrom: a)"), ("Kernel Target", None),
        ("DevToHost", "map(always, tofrom: a)"), ("DevToHost", "map(from: a)")]


def test_clause_text():
    from offload.clauses import MapType as T
    from offload.clauses import clause_text
    assert clause_text(T.TO | T.FROM | T.PRESENT | T.OMPX_HOLD, "x") == \
        "map(present, ompx_hold, tofrom: x)"
    assert clause_text(T.NONE, None, ending=True) == "map(release: unknown)"
    assert clause_text(T.FROM | T.DELETE, "x", ending=True) == "map(delete: x)"
    assert clause_text(T.FROM, "x", motion=True) == "update from(x)"


def test_cuda_copies_and_kernels_timed_by_cuda_events(runtime, tmp_path):
    from tests.plugins.cuda import test_cuda as t
    if t.NUM == 0:
        pytest.skip(f"no CUDA device: {t.WHY}")
    path = tmp_path / "p.json"
    runtime(OFFLOAD_PLUGINS="cuda", LIBOMPTARGET_PROFILE=str(path),
            LIBOMPTARGET_PROFILE_GRANULARITY="0")
    k = offload.compile_cuda(t.KERNELS)
    a = np.zeros(1 << 24, np.int32)
    offload.target(k.add_one, a, 0, a.size, map=[offload.tofrom(a, name="a")], device=0,
                   **t.blocks(a.size))
    s = offload.stream(0)
    offload.target(k.add_one, a, 0, a.size, map=[offload.tofrom(a, name="a")], device=0,
                   stream=s, **t.blocks(a.size))
    s.synchronize()
    s.close()
    offload.shutdown()
    assert (a == 2).all()
    events = _lanes(path)
    assert [e["name"] for e in events] == ["HostToDev", "Kernel Target", "DevToHost"] * 2
    assert {e["args"]["clock"] for e in events} == {"device"}
    for before, after in zip(events, events[1:], strict=False):   # in device order
        assert before["ts"] + before["dur"] <= after["ts"] + 1, (before, after)
    # 64 MiB each way: the copy takes its bytes' time, at under 100 GB/s
    assert all(e["dur"] > 64e6 / 100e9 * 1e6 for e in events if e["name"] != "Kernel Target")


def test_a_failed_copy_while_profiling_fails_as_without(runtime, sim, tmp_path):  # noqa: F811
    """A copy that fails between its timing events raises as it would unprofiled, leaves
    the table as it was, and the profile goes on timing the next ones on the device."""
    path = tmp_path / "p.json"
    runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path,
            LIBOMPTARGET_PROFILE=str(path), LIBOMPTARGET_PROFILE_GRANULARITY="0")
    a = np.arange(1024, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        sim.hsa_sim_fail_copies(1)
        with pytest.raises(offload.OffloadError, match="signal went to -1"):
            offload.target_update(from_=[a], device=0)
        assert offload.runtime.current().device(0).table.lookup(a.ctypes.data) is not None
        a[:] = -1
        offload.target_update(from_=[a], device=0)
    assert (a == np.arange(1024)).all()
    offload.shutdown()
    events = _lanes(path)
    assert [e["name"] for e in events] == ["HostToDev", "DevToHost"], events
    assert {e["args"]["clock"] for e in events} == {"device"}
