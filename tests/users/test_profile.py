"""LIBOMPTARGET_PROFILE (issue 31 item 1): a Chrome trace of copies and kernels in LLVM
19's names and form, plus a lane per device queue with bytes, route, kernel and source;
`python -m offload.trace summary` adds it up to what offload.stats counted."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import profile, trace
from tests.capi_support import built, ours  # noqa: F401 - fixtures

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# a child Python finds this offload first, and the rest where this process does
ENV = dict(os.environ,
           PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
N = 1 << 20                       # past the pitched double's staging threshold


def _valid(data):
    """Every event has what Chrome's trace-event format needs (trace.load's check)."""
    for e in data["traceEvents"]:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(e), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
    assert isinstance(data["beginningOfTime"], int)


def _device_events(data, name=None):
    return [e for e in data["traceEvents"] if e.get("cat") == "device"
            and (name is None or e["name"] == name)]


def test_copies_and_kernels_with_route_bytes_and_source(runtime, add_one, tmp_path):
    path = tmp_path / "p.json"
    runtime(OFFLOAD_PLUGINS="pitched", LIBOMPTARGET_PROFILE=str(path),
            LIBOMPTARGET_PROFILE_GRANULARITY="0")
    assert offload.runtime.current().device(0).table.observed   # off the fast paths
    a = np.zeros(N, np.uint8)
    before = offload.stats(0)
    with offload.target_data(offload.tofrom(a), device=0):          # staged both ways
        offload.target(add_one.add_one, a.view(np.int32), 0, 4, device=0)
    line = sys._getframe().f_lineno - 1
    with offload.locked(a, device=0):                                # pinned both ways
        with offload.target_data(offload.tofrom(a), device=0):
            pass
    after = offload.stats(0)
    offload.shutdown()                                               # writes the file
    data = json.loads(path.read_text())
    _valid(data)
    names = [e["name"] for e in data["traceEvents"] if e["ph"] == "X" and
             e.get("cat") != "device" and not e["name"].startswith("Total ")]
    assert names.count("HostToDev") == 2 and names.count("DevToHost") == 2, names
    assert names.count("Kernel Target") == 1, names
    llvm = [e for e in data["traceEvents"] if e["name"] == "HostToDev" and "detail" in
            e.get("args", {})]
    assert all(e["args"]["detail"].endswith(f";;Size={N}B") for e in llvm), llvm
    totals = {e["name"]: e["args"]["count"] for e in data["traceEvents"]
              if e["name"].startswith("Total ")}
    assert totals == {"Total HostToDev": 2, "Total DevToHost": 2, "Total Kernel Target": 1}
    kernel, = _device_events(data, "Kernel Target")
    assert kernel["args"]["kernel"] == "add_one"
    assert kernel["args"]["source"] == f"test_profile.py:{line}"
    s = trace.summarize(data)
    for route in ("staged", "pinned"):
        moved = sum(after[w][route] - before[w][route] for w in ("to_device", "from_device"))
        assert s.routes[route].bytes == moved == 2 * N, (route, s.routes)
        assert s.routes[route].count == 2
    assert s.kernels["add_one"].count == 1
    assert set(s.lanes.values()) == {"pitched device 0 queue 0"}


def test_llvms_granularity_keeps_totals_and_device_lanes(runtime, tmp_path):
    path = tmp_path / "p.json"
    runtime(LIBOMPTARGET_PROFILE=str(path))                          # default: 500 us
    a = np.zeros(64, np.int32)
    for _ in range(3):
        with offload.target_data(offload.tofrom(a), device=0):
            pass
    offload.shutdown()
    data = json.loads(path.read_text())
    _valid(data)
    short = [e for e in data["traceEvents"] if e["name"] == "HostToDev"
             and e.get("cat") != "device"]
    assert all(e["dur"] >= 500 for e in short)                        # a 256-byte memcpy: none
    assert len(_device_events(data, "HostToDev")) == 3
    total, = [e for e in data["traceEvents"] if e["name"] == "Total HostToDev"]
    assert total["args"]["count"] == 3


def test_no_profile_no_events_and_the_fast_paths_stay(runtime):
    runtime()
    assert profile.active is None
    assert not offload.runtime.current().device(0).table.observed


def test_a_later_runtime_continues_the_file(runtime, tmp_path):
    path = tmp_path / "p.json"
    a = np.zeros(64, np.int32)
    for _ in range(2):
        runtime(LIBOMPTARGET_PROFILE=str(path), LIBOMPTARGET_PROFILE_GRANULARITY="0")
        with offload.target_data(offload.tofrom(a), device=0):
            pass
        offload.shutdown()
    data = json.loads(path.read_text())
    assert len(_device_events(data, "HostToDev")) == 2


def test_bad_granularity_is_named(runtime):
    with pytest.raises(offload.OffloadError, match="LIBOMPTARGET_PROFILE_GRANULARITY='x'"):
        runtime(LIBOMPTARGET_PROFILE="p.json", LIBOMPTARGET_PROFILE_GRANULARITY="x")


def test_summary_command_and_timeline(runtime, add_one, tmp_path):
    path, png = tmp_path / "p.json", tmp_path / "t.png"
    runtime(OFFLOAD_HOST_NUM_DEVICES=2, LIBOMPTARGET_PROFILE=str(path))
    a = np.zeros(4096, np.int32)
    for d in (0, 1):
        offload.target(add_one.add_one, a, 0, a.size, map=[offload.tofrom(a)], device=d)
    offload.shutdown()
    res = subprocess.run([sys.executable, "-m", "offload.trace", "summary", str(path),
                          "--png", str(png)], capture_output=True, text=True, timeout=120,
                         env=ENV, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "host " in res.stdout and "add_one" in res.stdout, res.stdout
    assert "2 device queue lane(s)" in res.stdout, res.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 0, "pid": 1, "tid": 1, "name": "x"}]}')
    res = subprocess.run([sys.executable, "-m", "offload.trace", "summary", str(bad)],
                         capture_output=True, text=True, timeout=120,
                         env=ENV)
    assert res.returncode == 1 and "event 0 ('x') lacks dur" in res.stderr, res.stderr


def test_a_c_program_profiles_as_under_llvm(built, ours, tmp_path):  # noqa: F811
    """tests/capi/profile_events.c with LIBOMPTARGET_PROFILE_GRANULARITY=0 under LLVM 19
    and under offload: LLVM's HostToDev, DevToHost and Kernel Target events with their
    `Size=` details and totals, and the update's copy LLVM leaves out."""
    from tests.capi_support import LLVM_LIB, run
    counted = {}
    for who, lib in (("llvm", LLVM_LIB), ("offload", f"{ours}:{LLVM_LIB}")):
        path = tmp_path / f"{who}.json"
        rc, out, err = run(built["profile_events.c"], lib, LIBOMPTARGET_PROFILE=str(path),
                           LIBOMPTARGET_PROFILE_GRANULARITY="0")
        assert (rc, out) == (0, "1000\n"), err
        data = json.loads(path.read_text())
        _valid(data)
        mine = [(e["name"], e["args"]["detail"].rsplit(";", 1)[-1])
                for e in data["traceEvents"] if e["ph"] == "X" and e.get("cat") != "device"
                and e["name"] in ("HostToDev", "DevToHost")]
        totals = {e["name"]: e["args"]["count"] for e in data["traceEvents"]
                  if e["name"] in ("Total HostToDev", "Total DevToHost", "Total Kernel Target")}
        counted[who] = (sorted(mine), totals)
        if who == "offload":
            clauses = sorted(e["args"].get("clause") for e in _device_events(data)
                             if e["name"] != "Kernel Target")
            # the C program's clauses (built without -g: no map names, as LLVM says)
            assert clauses == ["map(to: unknown)", "map(tofrom: unknown)",
                               "map(tofrom: unknown)", "update from(unknown)"], clauses
    # LLVM 19 times no copy of `target update` (targetDataContiguous retrieves without a
    # time scope): offload's trace has that DevToHost too, and otherwise LLVM's events
    llvm_events, llvm_totals = counted["llvm"]
    assert llvm_totals == {"Total HostToDev": 2, "Total DevToHost": 1,
                           "Total Kernel Target": 1}, counted
    assert counted["offload"] == (sorted(llvm_events + [("DevToHost", "Size=4000B")]),
                                  {**llvm_totals, "Total DevToHost": 2}), counted
