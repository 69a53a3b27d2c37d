"""Issue 10: LLVM's mapping rules, from LLVM's own offload tests (named in each docstring,
paths under llvm-project/offload/test/), and no silently wrong result."""
import re
import threading
import warnings

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from tests.harness import run_threads

SOURCE = """
void add111(int *x) { *x += 111; }
void set222(int *x) { *x = 222; }
void fill(double *a, long n, double v) { for (long i = 0; i < n; ++i) a[i] = v; }
void touch(void *p, long n) { (void)p; (void)n; }
void scale(float *a, long n, float f) { for (long i = 0; i < n; ++i) a[i] *= f; }
void bytes(unsigned char *p, char *q, long n) { (void)p; (void)q; (void)n; }
"""


@pytest.fixture(scope="module")
def k():
    return offload.compile_c(SOURCE)


def state(dev=0):
    return offload.testing.state()["devices"].get(dev, {"mappings": 0, "allocations": 0})


def calls(plugin, kind):
    return [c for c in plugin.calls if c[0] == kind]


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


# ---- rule 6: kernel arguments checked before anything is mapped -------------------------------
@pytest.mark.parametrize("args,expect", [
    ((np.zeros(4, np.float32), 4, 1.0), r"parameter 0 \(double \*\): expected an array of "
                                         r"float64, got float32\[4\]"),
    ((np.zeros(4), 4.0, 1.0), r"parameter 1 \(long\): expected an integer, got float 4.0"),
    ((np.zeros(4), np.zeros(1, np.int64), 1.0), r"parameter 1 \(long\): expected a scalar, "
                                                r"got an array int64\[1\]"),
    ((1.5, 4, 1.0), r"parameter 0 \(double \*\): expected an array or a device address "
                    r"\(int\), got float 1.5"),
    ((np.zeros(4), 4), r"takes 3 argument\(s\) \(double \*, long, double\), 2 given"),
    ((np.zeros(4), "4", 1.0), r"parameter 1 \(long\): cannot pass str"),
])
def test_kernel_arguments_checked_before_mapping(rt, k, args, expect):
    with pytest.raises(OffloadError, match=r"kernel 'fill',? " + expect) as ei:
        offload.target(k.fill, *args, device=0)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    assert state() == {"mappings": 0, "allocations": 0}


def test_kernel_arguments_checked_on_the_host_fallback_too(rt, k):
    with pytest.raises(OffloadError, match="expected an array of float64, got int32"):
        offload.target(k.fill, np.zeros(3, np.int32), 3, 1.0,
                       device=offload.omp_get_initial_device())


def test_kernel_arguments_that_fit(rt, k):
    a = np.zeros(4)
    with pytest.raises(OffloadError, match="expected a float, got int 2"):
        offload.target(k.fill, a, 4, 2, device=0)                 # an int for a double
    offload.target(k.fill, a, 4, 2.0, device=0)
    assert (a == 2).all()
    offload.target(k.fill, a, np.int32(4), np.float32(3.0), device=0)
    assert (a == 3).all()
    offload.target(k.touch, np.zeros((2, 2), np.complex64), 1, device=0)   # void *: any
    with offload.target_data(offload.tofrom(a), device=0):
        addr = offload.omp_get_mapped_ptr(a, 0)
        offload.target(k.fill, addr, 4, 5.0, device=0)            # an int: a device address
    assert (a == 5).all()
    offload.target(k.bytes, np.zeros(2, np.uint8), np.zeros(2, np.int8), 2, device=0)
    with pytest.raises(OffloadError, match="expected an array of uint8, got int8"):
        offload.target(k.bytes, np.zeros(2, np.int8), np.zeros(2, np.int8), 2, device=0)


def test_cuda_prototypes_are_read_from_the_source():
    from offload.plugins.args import Param, params_from_prototype
    from offload.plugins.nvrtc import kernel_prototypes
    src = ('extern "C" __global__ void __launch_bounds__(256) k(float * __restrict__ a, '
           'long n) { }\n__device__ float helper(float x) { return x; }\n'
           'extern "C" __global__ void v(float4 *p) { }')
    protos = kernel_prototypes(src)
    assert set(protos) == {"k", "v"}
    assert params_from_prototype(protos["k"], "k") == [Param("float *", True, "f", 4),
                                                       Param("long", False, "i", 8)]
    assert params_from_prototype(protos["v"], "v") is None       # CUDA-only type: by count


def test_amdgpu_metadata_params():
    from offload.plugins.amdgpu import metadata_param
    p = metadata_param({".value_kind": "global_buffer", ".size": 8, ".type_name": "float*"})
    assert p.pointer and p.kind == "f" and p.size == 4
    q = metadata_param({".value_kind": "by_value", ".size": 4, ".type_name": "int"})
    assert not q.pointer and q.kind == "i"
    r = metadata_param({".value_kind": "by_value", ".size": 4})
    assert r.kind is None and r.size == 4                        # unknown: not checked


# ---- rule 7: refused, nothing mapped -------------------------------------------------------------
def test_object_dtypes_are_refused(rt, k):
    objs = np.array([object(), object()])
    nested = np.zeros(2, dtype=[("a", np.int32), ("o", object)])
    for bad in (objs, nested):
        with pytest.raises(OffloadError, match="holds Python objects"):
            offload.target_enter_data(offload.to(bad), device=0)
        with pytest.raises(OffloadError, match="holds Python objects"):
            offload.lock(bad, device=0)
        assert offload.omp_target_memcpy(bad, np.zeros(16, np.uint8), 16, 0, 0,
                                         offload.omp_get_initial_device(),
                                         offload.omp_get_initial_device()) == -1
    assert state() == {"mappings": 0, "allocations": 0}


def test_read_only_destinations_are_refused(rt, capsys):
    ro = np.zeros(8, np.int32)
    offload.target_enter_data(offload.to(ro), device=0)
    ro.flags.writeable = False
    with pytest.raises(OffloadError, match="read-only"):
        offload.target_exit_data(offload.from_(ro), device=0)
    assert state()["mappings"] == 1                              # nothing changed
    offload.target_exit_data(offload.release(ro), device=0)
    init = offload.omp_get_initial_device()
    src = np.ones(8, np.int32)
    assert offload.omp_target_memcpy(ro, src, 32, 0, 0, init, init) == -1
    assert offload.omp_target_memcpy(b"\0" * 32, src, 32, 0, 0, init, init) == -1
    assert (ro == 0).all()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("read-only" in ln for ln in err)


def test_target_update_wants_a_list(rt):
    a = np.zeros((4, 4), np.int32)
    offload.target_enter_data(offload.to(a), device=0)
    with pytest.raises(OffloadError, match=r"expected a list of arrays or map clauses, got "
                                           r"ndarray; write target_update: to=\[a\]"):
        offload.target_update(to=a, device=0)
    offload.target_exit_data(offload.release(a), device=0)


# ---- rule 8: no silent host fallback; the default device ------------------------------------------
def test_fallback_is_reported_once(runtime, capsys, k):
    """A kernel with no binary for its device runs on the host: said once per image and
    device (OffloadWarning, and a LIBOMPTARGET_INFO line), never silently."""
    runtime(OFFLOAD_PLUGINS="noimage", LIBOMPTARGET_INFO=0x10)
    x = np.array([111], np.int32)
    with pytest.warns(offload.OffloadWarning, match=r"kernel 'add111' has no binary for "
                                                    r"device 0 \(noimage\); running it on "
                                                    r"the host"):
        offload.target(k.add111, x, device=0)
    assert x[0] == 222
    assert "has no binary for device 0" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        offload.target(k.add111, x, device=0)           # the same image: said already
    assert x[0] == 333
    runtime(OFFLOAD_PLUGINS="noimage", OMP_TARGET_OFFLOAD="mandatory")
    with pytest.raises(OffloadError, match="no binary for device 0"):
        offload.target(k.add111, x, device=0)


def test_disabled_offload_default_device_is_the_initial_device(runtime):
    """LLVM's api/omp_get_default_device_test.c and omp_set_default_device_disabled.c:
    under OMP_TARGET_OFFLOAD=disabled omp_get_default_device() is the initial device,
    whatever omp_set_default_device set or OMP_DEFAULT_DEVICE says, on every thread."""
    runtime(OMP_TARGET_OFFLOAD="disabled", OFFLOAD_HOST_NUM_DEVICES=2, OMP_DEFAULT_DEVICE=1)
    initial = offload.omp_get_initial_device()
    assert offload.omp_get_default_device() == initial
    offload.omp_set_default_device(1)
    assert offload.omp_get_default_device() == initial
    seen = []
    run_threads(lambda: seen.append(offload.omp_get_default_device()), [()])
    assert seen == [initial]
    runtime(OFFLOAD_HOST_NUM_DEVICES=2, OMP_DEFAULT_DEVICE=1)     # not disabled: as set
    assert offload.omp_get_default_device() == 1


def test_default_device_is_per_thread_and_unchecked(rt, k):
    """libomp: omp_set_default_device stores the ICV as given, per thread; a construct
    then given a number that is no device fails (LLVM aborts; we raise)."""
    offload.omp_set_default_device(5)
    assert offload.omp_get_default_device() == 5
    seen = []
    run_threads(lambda: seen.append(offload.omp_get_default_device()), [()])
    assert seen == [0]                                 # another thread: OMP_DEFAULT_DEVICE
    x = np.zeros(1, np.int32)
    with pytest.raises(OffloadError, match="device number '5' out of range"):
        offload.target(k.add111, x)
    offload.omp_set_default_device(offload.omp_get_initial_device())
    offload.target(k.add111, x)                        # the initial device: the host
    assert x[0] == 111
    offload.omp_set_default_device(1)
    offload.target(k.add111, x)
    assert x[0] == 222 and offload.omp_get_default_device() == 1
    offload.omp_set_default_device(0)


# ---- rule 9: the OpenMP-named functions keep the C convention for every bad input --------------------
BAD_SIZES = [None, "8", 8.0, 2**64, -1]


def _one_error(capsys):
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("omptarget error: "), err


@pytest.mark.parametrize("bad", BAD_SIZES)
def test_memcpy_bad_sizes_and_offsets(rt, capsys, bad):
    init = offload.omp_get_initial_device()
    a, b = np.zeros(16, np.uint8), np.ones(16, np.uint8)
    for args in ((a, b, bad, 0, 0), (a, b, 4, bad, 0), (a, b, 4, 0, bad)):
        assert offload.omp_target_memcpy(*args, init, init) == -1
        _one_error(capsys)
    assert (a == 0).all()


def test_memcpy_past_the_end_of_an_array(rt, capsys):
    init = offload.omp_get_initial_device()
    a, b = np.zeros(16, np.uint8), np.ones(64, np.uint8)
    assert offload.omp_target_memcpy(a, b, 17, 0, 0, init, init) == -1
    _one_error(capsys)
    assert offload.omp_target_memcpy(a, b, 8, 9, 0, init, init) == -1
    _one_error(capsys)
    assert offload.omp_target_memcpy(b, a, 8, 0, 9, init, init) == -1
    _one_error(capsys)
    d = offload.omp_target_alloc(16, 0)             # device memory we allocated: checked
    assert offload.omp_target_memcpy(d, b, 64, 0, 0, 0, init) == -1
    _one_error(capsys)
    assert offload.omp_target_memcpy(d, b, 8, 12, 0, 0, init) == -1
    _one_error(capsys)
    assert offload.omp_target_memcpy(a, d, 32, 0, 0, init, 0) == -1
    _one_error(capsys)
    assert offload.omp_target_memcpy(d, b, 16, 0, 0, 0, init) == 0
    offload.omp_target_free(d, 0)
    assert (a == 0).all()


@pytest.mark.parametrize("change", [
    {"element_size": 0}, {"element_size": None}, {"num_dims": 0}, {"num_dims": "3"},
    {"num_dims": 10**9}, {"volume": [4, 4, 4]}, {"volume": [1, 1, -1]},
    {"dst_offsets": [0, 0, 3]}, {"src_offsets": [2, 2, 2.0]}, {"dst_dimensions": [2, 2]},
    {"src_dimensions": [4, 4, 5]}, {"volume": None}, {"volume": 5},
])
def test_memcpy_rect_bad_input(rt, capsys, change):
    init = offload.omp_get_initial_device()
    dst, src = np.zeros((4, 4, 4), np.int32), np.ones((4, 4, 4), np.int32)
    args = dict(element_size=4, num_dims=3, volume=[2, 2, 2], dst_offsets=[1, 1, 1],
                src_offsets=[0, 0, 0], dst_dimensions=[4, 4, 4], src_dimensions=[4, 4, 4])
    args.update(change)
    rc = offload.omp_target_memcpy_rect(dst, src, args["element_size"], args["num_dims"],
                                        args["volume"], args["dst_offsets"],
                                        args["src_offsets"], args["dst_dimensions"],
                                        args["src_dimensions"], init, init)
    assert rc == -1
    _one_error(capsys)
    assert (dst == 0).all()


def test_memcpy_rect_many_dimensions_without_recursion(rt):
    init = offload.omp_get_initial_device()
    nd = 2000                                      # deeper than Python's recursion limit
    src = np.arange(8, dtype=np.uint8)
    dst = np.zeros(8, np.uint8)
    ones, zeros = [1] * (nd - 1), [0] * (nd - 1)
    assert offload.omp_target_memcpy_rect(dst, src, 1, nd, ones + [8], zeros + [0],
                                          zeros + [0], ones + [8], ones + [8], init, init) == 0
    np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("bad", BAD_SIZES)
def test_alloc_lock_associate_bad_sizes(rt, capsys, bad):
    if bad == -1:
        assert offload.omp_target_alloc(bad, 0) == 0      # LLVM: NULL, no message
        assert capsys.readouterr().err == ""
    else:
        assert offload.omp_target_alloc(bad, 0) == 0
        _one_error(capsys)
    a = np.zeros(4096, np.uint8)
    assert offload.llvm_omp_target_lock_mem(a, bad, 0) == 0
    _one_error(capsys)
    d = offload.omp_target_alloc(16, 0)
    assert offload.omp_target_associate_ptr(a, d, bad, 0, 0) == -1
    _one_error(capsys)
    assert offload.omp_target_associate_ptr(a, d, 16, bad, 0) == -1
    _one_error(capsys)
    offload.omp_target_free(d, 0)
    assert offload.omp_target_is_accessible(a, bad, 0) == 0
    _one_error(capsys)
    assert state() == {"mappings": 0, "allocations": 0}


def test_lock_past_the_end_of_an_array(rt, capsys):
    a = np.zeros(100, np.uint8)
    assert offload.llvm_omp_target_lock_mem(a, 101, 0) == 0
    _one_error(capsys)
    assert offload.testing.state()["pins"]["host"]["entries"] == 0


def test_bad_pointers_keep_the_c_convention(rt, capsys):
    for fn, args in ((offload.omp_target_free, ("x", 0)),
                     (offload.omp_target_is_present, (3.5, 0)),
                     (offload.omp_get_mapped_ptr, ([1, 2], 0)),
                     (offload.llvm_omp_target_unlock_mem, (object(), 0))):
        fn(*args)
        _one_error(capsys)


def test_threads_share_nothing_through_the_default_device(rt):
    barrier = threading.Barrier(2)
    got = {}

    def work(n):
        offload.omp_set_default_device(n)
        barrier.wait()
        got[n] = offload.omp_get_default_device()

    run_threads(work, [(0,), (1,)])
    assert got == {0: 0, 1: 1}
