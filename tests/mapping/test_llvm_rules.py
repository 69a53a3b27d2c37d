"""LLVM's mapping rules 1-5, from LLVM's own offload tests (named in each
docstring, paths under llvm-project/offload/test/): several clauses for one array, present
as the table stood, mandatory with no device, diagnostics as LLVM prints them."""
import re
import warnings

import numpy as np
import pytest

import offload
from offload import OffloadError
from tests.llvm_rules_support import calls, k, state  # noqa: F401 - k: fixtures


# ---- rule 1: several clauses for one array on one construct ----------------------------
def test_alloc_tofrom_alloc_copies_in_and_out(rt, k):
    """mapping/map_ordering_tgt_alloc_tofrom.c: the entry is made by the first clause,
    `to` copies because this construct made it, `from` runs at the last reference."""
    x = np.array([111], np.int32)
    offload.target(k.add111, x, map=[offload.alloc(x), offload.tofrom(x), offload.alloc(x)],
                   device=0)
    assert x[0] == 222
    assert state() == {"mappings": 0, "allocations": 0}


def test_alloc_from_to_alloc_copies_in_and_out(rt, k):
    """mapping/map_ordering_tgt_alloc_from_to.c: "to" after "alloc" and "from" still copies
    in, as the reference count went from 0 to 1 at the entry of this region."""
    x = np.array([111], np.int32)
    offload.target(k.add111, x, map=[offload.alloc(x), offload.from_(x), offload.to(x),
                                     offload.alloc(x)], device=0)
    assert x[0] == 222


def test_data_region_alloc_to_from_alloc(rt, k):
    """mapping/map_ordering_tgt_data_alloc_to_from.c and ..._tgt_data_alloc_tofrom.c."""
    x = np.array([111], np.int32)
    with offload.target_data(offload.alloc(x), offload.to(x), offload.from_(x),
                             offload.alloc(x), device=0):
        offload.target(k.add111, x, map=[offload.alloc(x, present=True)], device=0)
    assert x[0] == 222


def test_enter_to_on_data_made_elsewhere_does_not_copy_then_delete_from_copies(recording, k):
    """mapping/map_ordering_tgt_exit_data_delete_from.c: `to` on an entry an enclosing
    region made copies nothing; exit data map(delete) map(from) map(delete) copies back
    before the entry goes."""
    x = np.array([111], np.int32)
    with offload.target_data(offload.alloc(x), device=0):
        offload.target_enter_data(offload.alloc(x), offload.to(x), device=0)
        assert calls(recording, "submit") == []
        offload.target(k.set222, x, map=[offload.alloc(x, present=True)], device=0)
        offload.target_exit_data(offload.delete(x), offload.from_(x), offload.delete(x),
                                 device=0)
        assert x[0] == 222
        assert state()["mappings"] == 0         # deleted: the region's end finds nothing
    assert state() == {"mappings": 0, "allocations": 0}


def test_two_always_from_clauses_copy_once(recording, k):
    """mapping/map_ordering_tgt_exit_data_always_always.c: one transfer despite the two
    duplicate maps."""
    x = np.array([111], np.int32)
    with offload.target_data(offload.alloc(x), device=0):
        offload.target_enter_data(offload.alloc(x), offload.to(x), device=0)
        offload.target(k.set222, x, map=[offload.alloc(x, present=True)], device=0)
        before = len(calls(recording, "retrieve"))
        offload.target_exit_data(offload.from_(x, always=True), offload.from_(x, always=True),
                                 device=0)
        assert len(calls(recording, "retrieve")) == before + 1
    assert x[0] == 222


# ---- rule 2: present is judged as the table stood when the construct began -------------------
def test_present_after_an_alloc_of_the_same_construct_fails(rt, k):
    """mapping/map_ordering_tgt_alloc_present_tofrom.c must fail as in LLVM."""
    x = np.array([111], np.int32)
    with pytest.raises(OffloadError, match=r"device mapping required by 'present' map type "
                                           r"modifier does not exist for host address 0x"):
        offload.target(k.add111, x, map=[offload.alloc(x), offload.alloc(x, present=True),
                                         offload.tofrom(x)], device=0)
    assert state() == {"mappings": 0, "allocations": 0}
    assert x[0] == 111


# ---- rule 3: the end of a data region does not re-check present -----------------------------
def test_end_of_data_region_does_not_check_present(rt):
    """mapping/present/target_data.c: clang drops `present` from the end call, so data
    deleted inside the region is no error at its end."""
    x = np.zeros(4, np.int32)
    offload.target_enter_data(offload.to(x), device=0)
    with offload.target_data(offload.tofrom(x, present=True), device=0):
        offload.target_exit_data(offload.delete(x), device=0)
    assert state()["mappings"] == 0


# ---- rule 4: mandatory with no device ----------------------------------------------------------
@pytest.mark.parametrize("construct", ["target", "target_data", "enter", "exit", "update"])
def test_mandatory_without_devices_fails_every_construct(runtime, k, construct):
    """offloading/mandatory_but_no_devices.c: device(omp_get_initial_device()) included."""
    runtime(OMP_TARGET_OFFLOAD="mandatory", OFFLOAD_HOST_NUM_DEVICES=0)
    assert offload.omp_get_num_devices() == 0
    x = np.zeros(1, np.int32)
    init = offload.omp_get_initial_device()
    run = {"target": lambda: offload.target(k.add111, x, device=init),
           "target_data": lambda: offload.target_data(offload.to(x), device=init).__enter__(),
           "enter": lambda: offload.target_enter_data(offload.to(x), device=init),
           "exit": lambda: offload.target_exit_data(offload.from_(x), device=init),
           "update": lambda: offload.target_update(to=[x], device=init)}[construct]
    with pytest.raises(OffloadError,
                       match="failure of target construct while offloading is mandatory"):
        run()
    assert x[0] == 0


def test_default_policy_without_devices_runs_on_the_host(runtime, k):
    """LLVM's checkDevice: no device and offload not mandatory -> the host, silently."""
    runtime(OFFLOAD_HOST_NUM_DEVICES=0)
    x = np.array([111], np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        offload.target(k.add111, x)
    assert x[0] == 222


# ---- rule 5: diagnostics as LLVM prints them ---------------------------------------------------
def test_present_extension_prints_both_messages_in_order(rt, k):
    """mapping/present/target_array_extension.c: the extension message, then the
    present message, then the array and a hint."""
    arr = np.zeros(100, np.int32)
    with offload.target_data(offload.alloc(arr[:2]), device=0):
        with pytest.raises(OffloadError) as ei:
            offload.target(k.touch, arr, 400, map=[offload.tofrom(arr, present=True)],
                           device=0)
    lines = ei.value.message.splitlines()
    small, large = arr[:2].ctypes.data, arr.ctypes.data
    assert lines[0] == (f"explicit extension not allowed: host address specified is "
                        f"0x{large:x} (400 bytes), but device allocation maps to host at "
                        f"0x{small:x} (8 bytes)")
    assert lines[1] == (f"device mapping required by 'present' map type modifier does not "
                        f"exist for host address 0x{large:x} (400 bytes)")
    assert "int32[100]" in lines[2]
    assert state() == {"mappings": 0, "allocations": 0}


def test_present_missing_names_the_array(rt):
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(OffloadError) as ei:
        offload.target_enter_data(offload.to(x, present=True, name="x"), device=0)
    first, second = ei.value.message.splitlines()
    assert first.startswith("device mapping required by 'present' map type modifier")
    assert "array float32[3, 4] 'x'" in second and "hint" not in first


def test_update_present_says_motion_modifier(rt):
    """mapping/present/target_update.c."""
    x = np.zeros(3, np.int32)
    with pytest.raises(OffloadError, match="'present' motion modifier does not exist"):
        offload.target_update(to=[offload.to(x, present=True)], device=0)


@pytest.mark.parametrize("dyn", ["0", "1", "inf"])
def test_disassociate_under_a_hold_reference(rt, capsys, dyn):
    """mapping/ompx_hold/omp_target_disassociate_ptr.c: always fails while the hold count
    is non-zero, whatever the dynamic count, with LLVM's text."""
    x = np.zeros(1, np.int32)
    d = offload.omp_target_alloc(x.nbytes, 0)
    if dyn == "inf":
        assert offload.omp_target_associate_ptr(x, d, x.nbytes, 0, 0) == 0
    else:
        for _ in range(int(dyn)):
            offload.target_enter_data(offload.alloc(x), device=0)
    with offload.target_data(offload.alloc(x, hold=True), device=0):
        assert offload.omp_target_disassociate_ptr(x, 0) == -1
    err = capsys.readouterr().err.splitlines()
    assert err == ["omptarget error: Trying to disassociate a pointer with a non-zero hold "
                   "reference count"]
    if dyn == "inf":
        assert offload.omp_target_disassociate_ptr(x, 0) == 0
    offload.omp_target_free(d, 0)


def test_disassociate_texts(rt, capsys):
    x = np.zeros(1, np.int32)
    assert offload.omp_target_disassociate_ptr(x, 0) == -1
    offload.target_enter_data(offload.alloc(x), device=0)
    assert offload.omp_target_disassociate_ptr(x, 0) == -1
    assert capsys.readouterr().err.splitlines() == [
        "omptarget error: Association not found",
        "omptarget error: Trying to disassociate a pointer which was not mapped via "
        "omp_target_associate_ptr"]


def _info_lines(err):
    return [ln for ln in err.splitlines() if ln.startswith("omptarget device 0 info: ")]


def test_info_order_and_table_dumps(runtime, capsys, k):
    """offloading/info.c: dumps after the data region's start and after the kernel, and
    "table empty" after the region's end (dumpTargetPointerMappings on an empty table),
    every line prefixed; the copy back precedes "Removing map entry"."""
    runtime(LIBOMPTARGET_INFO="-1")
    a = np.zeros(64, np.int32)
    b = np.zeros(64, np.int32)
    with offload.target_data(offload.alloc(a, name="A[0:64]"),
                             offload.tofrom(b, hold=True, name="B[0:64]"), device=0):
        offload.target(k.add111, b, device=0)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln]
    assert all(ln.startswith("omptarget device 0 info: ") for ln in lines), lines
    body = [ln[len("omptarget device 0 info: "):] for ln in lines]
    dumps = [i for i, ln in enumerate(body) if ln.startswith("OpenMP Host-Device pointer "
                                                            "mappings after block at ")]
    assert len(dumps) == 2
    empty = [i for i, ln in enumerate(body)
             if ln == "OpenMP Host-Device pointer mappings table empty"]
    assert len(empty) == 1 and empty[0] > dumps[1]
    assert re.search(r"after block at test_llvm_rules\.py:\d+:0:$", body[dumps[0]])
    assert re.match(r"Host Ptr {11}Target Ptr {9}Size \(B\) DynRefCount HoldRefCount "
                    r"Declaration$", body[dumps[0] + 1])
    row = body[dumps[0] + 2]
    assert re.match(r"0x[0-9a-f]{16} 0x[0-9a-f]{16} 256      (0|1) +(0|1) +[AB]\[0:64\] at "
                    r"test_llvm_rules\.py:\d+:0$", row), row
    copy_back = next(i for i, ln in enumerate(body)
                     if ln.startswith("Copying data from device to host") and "B[0:64]" in ln)
    removing = [i for i, ln in enumerate(body) if ln.startswith("Removing map entry")]
    assert len(removing) == 2 and copy_back < min(removing) < max(removing) < empty[0]


def test_info_minus_one_means_every_bit(runtime):
    runtime(LIBOMPTARGET_INFO="-1")
    assert int(offload.runtime.current().config.info) == 0x7F


