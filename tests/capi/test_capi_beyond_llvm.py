"""Drop-in programs LLVM 19 gets wrong, run on offload's runtime alone (tests/capi/*.in),
and kernels recorded and replayed by LLVM 19's own llvm-omp-kernel-replay."""
import os
import subprocess

import pytest

from tests.capi_support import (  # noqa: F401 - fixtures
    CLANG, CLANGXX, HERE, LLVM_LIB, TARGET, WHY, built, ours, run, run_on_ours,
)

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")


def test_strided_update_where_llvm_drops_elements(tmp_path, ours):
    """m[3:1][0:2:3] asks for columns 0 and 3 of row 3; LLVM 19 moves column 0 only.
    offload moves both (and nothing else)."""
    rc, out, err = run_on_ours(tmp_path, ours, "strided_beyond_llvm.c.in")
    assert rc == 0, err
    assert out.split() == ["-18", "19", "20", "-21", "22", "23"]


def test_interop_objects_where_llvm_crashes(tmp_path, ours):
    """`#pragma omp interop init(targetsync: obj) device(0)` on a host device: LLVM 19
    segfaults; offload makes an object that names the device (other properties: no value,
    omp_irc_no_value) and destroy resets it to omp_interop_none."""
    rc, out, err = run_on_ours(tmp_path, ours, "interop_beyond_llvm.c.in")
    assert rc == 0, err
    assert out.splitlines() == [
        "after init with depend: x=1", "after use with depend: x=1",
        "after destroy with depend: x=1", "obj is none: 0", "fr_id 0 rc 1",
        "fr_name (null) rc 1", "device_num 0 rc 0",
        "targetsync null 1 rc 1", "name of fr_id: fr_id, type int", "destroyed, none: 1"]


def test_alloc_then_to_copies_where_llvm_19_does_not(tmp_path, ours):
    """map(alloc: x) map(from: x) map(to: x) on one region: the entry is new in the
    construct, so `to` copies; target data map(alloc: y) map(tofrom: y) copies y back when
    it drops the last reference (later LLVM's map_ordering tests). LLVM 19 does neither."""
    rc, out, err = run_on_ours(tmp_path, ours, "ordering_beyond_llvm.c.in")
    assert rc == 0, err
    assert out.splitlines() == ["region saw x=111", "after: x=1111", "after data: y=223",
                              "after data: w=445"]


def test_mapper_on_data_constructs_where_llvm_19_moves_nothing(tmp_path, ours):
    """A declared mapper used by enter/exit data, update and target data moves the pointee
    cells each time (LLVM 19 moves none of them in this program)."""
    rc, out, err = run_on_ours(tmp_path, ours, "mapper_data_beyond_llvm.cpp.in")
    assert rc == 0, err
    assert out.splitlines() == ["after update: 2 18, pointer kept 1", "after exit: -2 -2",
                                "after data: 55"]


def test_ompt_non_emi_tool_gets_an_id_for_enter_data(tmp_path, ours):
    """A non-EMI OMPT tool hears what LLVM 19 tells it (ompt_non_emi_beyond_llvm.c.in),
    except that `target enter data` gets a target id of its own (LLVM 19: 0, so the
    region's data operations fall under no region)."""
    rc, out, err = run_on_ours(tmp_path, ours, "ompt_non_emi_beyond_llvm.c.in")
    assert rc == 0, err
    llvm = run(str(tmp_path / "ompt_non_emi_beyond_llvm"), LLVM_LIB)
    assert llvm[0] == 0, llvm[2]
    expected, inside, changed = [], False, 0
    for line in llvm[1].splitlines():
        if line.startswith("target enter_data begin"):
            inside = True
            line = line.replace(" id=0 ", " id=new ")
        elif line.startswith("target enter_data end"):
            inside = False
            line = line.replace(" id=0 ", " id=cur ")
        elif inside and line.startswith("data_op "):
            line = line.replace(" target=0 ", " target=cur ")
        changed += line not in llvm[1].splitlines()
        expected.append(line)
    assert changed == 8                  # two enter data regions: begin, end, two copies
    assert out.splitlines() == expected


def test_runtime_references_and_removed_requires_as_llvm(built, ours):
    """rtl_refcount.c under LIBOMPTARGET_INFO=4: __tgt_register_requires' message, and the
    tables dumped when the last reference goes (the program's own deinit does not end
    the runtime its library still holds) -- stderr as LLVM 19's, line for line."""
    exe = built["rtl_refcount.c"]
    llvm = run(exe, LLVM_LIB, LIBOMPTARGET_INFO="4")
    mine = run(exe, f"{ours}:{LLVM_LIB}", LIBOMPTARGET_INFO="4")
    assert llvm[0] == mine[0] == 0
    assert "function has been removed" in llvm[2] and "table empty" in llvm[2]
    def lines(err):
        return [line for line in err.splitlines() if not line.startswith("OMP: ")]
    assert lines(mine[2]) == lines(llvm[2])


def test_legacy_launch_entries_where_llvm_19_crashes(tmp_path, ours):
    """__tgt_target, __tgt_target_mapper, __tgt_target_teams(_mapper) after a pushed trip
    count, __tgt_target_nowait_mapper: each runs the region once (LLVM 19 crashes in the
    first: no launch environment for a clang-19 kernel)."""
    rc, out, err = run_on_ours(tmp_path, ours, "legacy_entries_beyond_llvm.c.in")
    assert rc == 0, err
    assert out.splitlines() == [
        "the region: 1 1", "__tgt_target 0: 3 3", "__tgt_target_mapper 0: 7 7",
        "__tgt_target_teams 0: 15 15", "__tgt_target_teams_mapper 0: 31 31",
        "__tgt_target_nowait_mapper 0: 63 63"]


REPLAY = os.path.join(os.path.dirname(LLVM_LIB), "bin", "llvm-omp-kernel-replay")


def _replay(ours, json_path):
    """LLVM 19's llvm-omp-kernel-replay --verify of one recorded kernel, on offload."""
    rc, out, err = run(REPLAY, f"{ours}:{LLVM_LIB}", "--verify", os.path.basename(json_path),
                       cwd=os.path.dirname(json_path))
    assert rc == 0, err
    return out.strip()


def _check_recording(directory, kernels):
    """The files of each recorded kernel, as LLVM's RecordReplayTy writes them."""
    import json
    found = sorted(p[:-5] for p in os.listdir(directory) if p.endswith(".json"))
    assert len(found) == kernels, found
    for name in found:
        with open(os.path.join(directory, name + ".json")) as f:
            desc = json.load(f)
        assert desc["Name"] == name and name.startswith("__omp_offloading_")
        assert desc["NumArgs"] == len(desc["ArgPtrs"]) == len(desc["ArgOffsets"])
        memory = os.path.getsize(os.path.join(directory, name + ".memory"))
        assert desc["DeviceMemorySize"] == memory > 0 and memory % 16 == 0
        start = desc["BumpAllocVAStart"]
        assert any(start <= p < start + memory for p in desc["ArgPtrs"])   # device memory
        with open(os.path.join(directory, name + ".image"), "rb") as f:
            assert f.read(4) == b"\x7fELF"
        assert os.path.getsize(os.path.join(directory, name + ".original.output")) == memory
    return [os.path.join(directory, name + ".json") for name in found]


@pytest.mark.skipif(not os.path.exists(REPLAY), reason="llvm-omp-kernel-replay not installed")
def test_kernels_recorded_and_replayed_by_llvms_tool(tmp_path, ours):
    """__tgt_activate_record_replay(record, save output): each launch writes LLVM's files
    (description, image, memory before, memory after); LLVM 19's llvm-omp-kernel-replay
    replays each on offload's runtime and finds the same memory after the kernel; with
    the recorded input changed it does not (the replay really ran the kernel)."""
    rc, out, err = run_on_ours(tmp_path, ours, "record_replay_beyond_llvm.c.in")
    assert rc == 0, err
    assert out.splitlines() == ["activate rc=0 offset=0", "a[0]=113 a[5]=13"]
    recorded = _check_recording(tmp_path, 2)
    for path in recorded:
        assert _replay(ours, path) == "[llvm-omp-kernel-replay] Replay device memory verified!"
        assert _replay_ours(path) == (0, "replay device memory verified")
    first = recorded[0][:-5] + ".memory"      # the first region: a[i] = a[i] * 2 + s
    data = bytearray(open(first, "rb").read())
    data[4] ^= 0x7F                            # a[1], as the kernel finds it
    open(first, "wb").write(bytes(data))
    assert _replay(ours, recorded[0]) == \
        "[llvm-omp-kernel-replay] Replay device memory failed to verify!"
    assert _replay_ours(recorded[0]) == (1, "replay device memory failed to verify")


def _replay_ours(json_path):
    """python -m offload.capi.replay --verify (offload's replayer, for machines without
    LLVM's tool), in a fresh process from another directory."""
    import sys
    res = subprocess.run([sys.executable, "-m", "offload.capi.replay", "--verify", json_path],
                         capture_output=True, text=True, timeout=120, cwd=HERE)
    return res.returncode, res.stdout.strip() or res.stderr[-2000:]


@pytest.mark.skipif(not os.path.exists(REPLAY), reason="llvm-omp-kernel-replay not installed")
def test_kernels_recorded_by_environment(tmp_path, built, ours):
    """LIBOMPTARGET_RECORD=1 with LIBOMPTARGET_RR_SAVE_OUTPUT=1 (LLVM 19's variables) records
    a program's launches without a line changed in it; each replays verified."""
    import shutil as sh
    exe = tmp_path / "data_refcount"
    sh.copy(built["data_refcount.c"], exe)
    rc, out, err = run(str(exe), f"{ours}:{LLVM_LIB}", LIBOMPTARGET_RECORD="1",
                       LIBOMPTARGET_RR_SAVE_OUTPUT="1", LIBOMPTARGET_RR_DEVMEM_SIZE="1")
    assert rc == 0, err
    assert out == run(built["data_refcount.c"], f"{ours}:{LLVM_LIB}")[1]
    recorded = [p for p in os.listdir(tmp_path) if p.endswith(".json")]
    assert recorded
    for path in _check_recording(tmp_path, len(recorded)):
        assert _replay(ours, path) == "[llvm-omp-kernel-replay] Replay device memory verified!"
