"""LLVM's rules 6-9 (named in each docstring, paths under
llvm-project/offload/test/): kernel arguments checked before anything is mapped, refusals
that map nothing, no silent host fallback, the OpenMP-named functions' C convention."""
import threading
import warnings

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from tests.harness import run_threads
from tests.llvm_rules_support import k, state  # noqa: F401 - k: fixtures


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
