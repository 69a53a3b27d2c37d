"""Zero-copy interop. Export (device_array: DLPack 1.0 / legacy capsules),
import (foreign device arrays as kernel arguments and copy endpoints, after their
producer's stream), offload queues handed out as streams, Pinned as DLPack. These run on
the host plugin everywhere; tests/users/test_interop_gpu.py does the same with CuPy / PyTorch."""
import ctypes
import math

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError, dlpack
from tests.fakes.foreign import CAIArray, DLPackArray

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype, _name.argtypes = ctypes.c_char_p, [ctypes.py_object]


def test_device_array_is_the_device_copy_without_a_copy(rt):
    a = np.arange(16, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        dv = offload.device_array(a, 0)
        assert dv.ptr == offload.omp_get_mapped_ptr(a, 0)
        assert dv.__dlpack_device__() == (dlpack.KDL_CPU, 0)
        view = np.from_dlpack(dv)                       # numpy reads the device copy
        assert view.ctypes.data == dv.ptr and view.dtype == a.dtype and view.shape == (16,)
        view *= 10                                      # written on the "device"
        assert a[3] == 3                                # the host copy is untouched ...
        offload.target_update(from_=[a], device=0)
        assert a[3] == 30                               # ... until it is updated from it


def test_device_array_capsules_versioned_and_legacy(rt):
    a = np.ones((4, 3), dtype=np.float32)
    with offload.target_data(offload.to(a), device=0):
        dv = offload.device_array(a, 0)
        assert _name(dv.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
        assert _name(dv.__dlpack__()) == b"dltensor"
        assert np.from_dlpack(dv).shape == (4, 3)
        for bad, says in (({"copy": True}, "without copies"),
                          ({"dl_device": (dlpack.KDL_CUDA, 0)}, "lives on")):
            with pytest.raises(BufferError, match=says) as got:   # the protocol's error
                dv.__dlpack__(**bad)
            assert isinstance(got.value, OffloadError) and \
                got.value.code == ErrorCode.UNSUPPORTED


def test_device_array_layouts_follow_the_mapping(rt):
    """A view's DLPack layout is made once per mapping: a sub-array, another shape of the
    same bytes, and a new mapping of the same array each export their own address/shape."""
    a = np.arange(24, dtype=np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        first = offload.omp_get_mapped_ptr(a, 0)
        assert np.from_dlpack(offload.device_array(a, 0)).ctypes.data == first
        assert np.from_dlpack(offload.device_array(a, 0)).shape == (24,)
        part = np.from_dlpack(offload.device_array(a[8:], 0))
        assert part.ctypes.data == first + 32 and part.shape == (16,)
        grid = np.from_dlpack(offload.device_array(a.reshape(4, 6), 0))
        assert grid.ctypes.data == first and grid.shape == (4, 6)
    keep = offload.omp_target_alloc(96, 0)          # the next mapping lands elsewhere
    try:
        with offload.target_data(offload.to(a), device=0):
            again = offload.omp_get_mapped_ptr(a, 0)
            v = np.from_dlpack(offload.device_array(a, 0))
            assert v.ctypes.data == again and v.tolist() == list(range(24))
    finally:
        offload.omp_target_free(keep, 0)


def test_device_array_column_major_and_strided(rt):
    a = np.asfortranarray(np.arange(20, dtype=np.int64).reshape(4, 5))
    with offload.target_data(offload.tofrom(a), device=0):
        v = np.from_dlpack(offload.device_array(a, 0))     # strides exported, not assumed
        assert v.tolist() == a.tolist()
        with pytest.raises(OffloadError, match="non-contiguous") as e:
            offload.device_array(a[::2], 0)
        assert e.value.code is ErrorCode.INVALID_ARGUMENT


def test_device_array_refuses_unmapped_and_the_initial_device(rt):
    a = np.zeros(8)
    with pytest.raises(OffloadError, match="not mapped on device 0") as e:
        offload.device_array(a, 0)
    assert e.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(OffloadError) as e:
        offload.device_array(a, offload.omp_get_initial_device())
    assert e.value.code is ErrorCode.INVALID_VALUE


def test_capsule_keeps_the_view_alive_until_its_deleter(rt):
    a = np.arange(8, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        before = len(dlpack._alive)
        cap = offload.device_array(a, 0).__dlpack__(max_version=(1, 0))
        assert len(dlpack._alive) == before + 1
        del cap                                        # never consumed: its deleter runs
        assert len(dlpack._alive) == before
        v = np.from_dlpack(offload.device_array(a, 0))  # consumed: freed with the view
        del v
        assert len(dlpack._alive) == before


# ---- exported views outlive what they view (issue 28 item 4; the DLPack contract) ------
def _device0():
    return offload.runtime.current().manager.get_device(0).generic


def test_an_exported_block_is_not_reused_after_its_mapping_goes(rt):
    """The tensor a consumer made keeps its memory after the mapping is removed: the
    next array mapped gets other memory, so writing through the tensor corrupts nothing
    (the block went back to the pool and the next mapping landed on it)."""
    a = np.arange(64, dtype=np.int32)
    b = np.zeros(64, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        t = np.from_dlpack(offload.device_array(a, 0))
    with offload.target_data(offload.tofrom(b), device=0):
        assert offload.omp_get_mapped_ptr(b, 0) != t.ctypes.data
        t[:] = -1                                      # the consumer writes its tensor
    assert (b == 0).all() and t.tolist() == [-1] * 64
    assert len(_device0().exported) == 1               # kept for the tensor ...
    del t
    assert len(_device0().exported) == 0               # ... freed with it
    assert offload.testing.state()["devices"][0] == {"mappings": 0, "allocations": 0}


@pytest.mark.parametrize("export", ["dlpack", "capsule", "view"])
def test_a_stale_device_array_exports_nothing(rt, export):
    """A DeviceArray kept past its mapping (or past a new mapping of the same array)
    hands out no pointer: NOT_FOUND, naming the removed mapping."""
    a = np.arange(8, dtype=np.float64)
    with offload.target_data(offload.to(a), device=0):
        dv = offload.device_array(a, 0)
    with offload.target_data(offload.to(a), device=0):  # mapped again: another entry
        for _ in range(2):
            with pytest.raises(OffloadError, match="was removed") as e:
                if export == "dlpack":
                    np.from_dlpack(dv)
                elif export == "capsule":
                    dv.__dlpack__(max_version=(1, 0))
                else:
                    dv.__dlpack__()
            assert e.value.code is ErrorCode.NOT_FOUND
    del dv
    assert offload.testing.state()["devices"][0] == {"mappings": 0, "allocations": 0}


def test_a_tensor_outlives_the_runtime(rt):
    """offload.shutdown() with a consumer's tensor alive: the tensor stays readable and
    writable (it was a SIGSEGV), and its block is freed when the tensor goes."""
    a = np.arange(1 << 16, dtype=np.int64)
    with offload.target_data(offload.to(a), device=0):
        t = np.from_dlpack(offload.device_array(a, 0))
    dev = _device0()
    offload.shutdown()
    assert t[12345] == 12345 and int(t.sum()) == int(a.sum())
    t += 1
    assert len(dev.exported) == 1
    del t
    assert len(dev.exported) == 0
    b = np.zeros(4)                                     # a new runtime starts cleanly
    with offload.target_data(offload.tofrom(b), device=0):
        pass
    assert offload.testing.state()["devices"][0] == {"mappings": 0, "allocations": 0}


def test_views_outlive_the_mapping_in_every_order(rt):
    """Several views and capsules of one mapping, dropped in every order around its
    unmap: each block freed exactly once, when the last view goes."""
    import itertools
    for order in itertools.permutations(range(3)):
        a = np.arange(32, dtype=np.int32)
        offload.target_enter_data(offload.to(a), device=0)
        holders = [np.from_dlpack(offload.device_array(a, 0)),
                   offload.device_array(a, 0),
                   offload.device_array(a[4:], 0).__dlpack__(max_version=(1, 0))]
        offload.target_exit_data(offload.release(a), device=0)
        for i in order:
            holders[i] = None
        assert len(_device0().exported) == 0, order
        assert offload.testing.state()["devices"][0] == {"mappings": 0, "allocations": 0}


def test_foreign_array_as_kernel_argument(rt, add_one):
    """A foreign device array (CUDA Array Interface) is a device pointer (is_device_ptr)."""
    n = 32
    d = offload.omp_target_alloc(n * 4, 0)
    try:
        host = np.arange(n, dtype=np.int32)
        assert offload.omp_target_memcpy(d, host, n * 4, 0, 0, 0,
                                         offload.omp_get_initial_device()) == 0
        foreign = CAIArray(d, (n,), np.int32)
        offload.target(add_one.add_one, foreign, 0, n, device=0)
        out = np.zeros(n, dtype=np.int32)
        # and as a copy source, through DLPack this time
        assert offload.omp_target_memcpy(out, DLPackArray(d, (n,), np.int32), n * 4, 0, 0,
                                         offload.omp_get_initial_device(), 0) == 0
        assert out.tolist() == list(range(1, n + 1))
    finally:
        offload.omp_target_free(d, 0)


def test_foreign_array_as_copy_destination_is_bounds_checked(rt, capsys):
    d = offload.omp_target_alloc(64, 0)
    try:
        src = np.full(16, 7, dtype=np.int32)
        dst = CAIArray(d, (16,), np.int32)
        init = offload.omp_get_initial_device()
        assert offload.omp_target_memcpy(dst, src, 64, 0, 0, 0, init) == 0
        back = np.zeros(16, dtype=np.int32)
        assert offload.omp_target_memcpy(back, d, 64, 0, 0, init, 0) == 0
        assert (back == 7).all()
        assert offload.omp_target_memcpy(dst, src, 68, 0, 0, 0, init) == -1
        assert "lie past the end of its 64-byte buffer" in capsys.readouterr().err
    finally:
        offload.omp_target_free(d, 0)


@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_a_foreign_array_with_gaps_is_refused_not_read_as_one_block(rt, add_one, capsys, kind):
    """A strided foreign view (every other element) is not prod(shape) elements from its
    pointer: refused as a kernel argument and as a copy endpoint, naming its strides, as
    a non-contiguous host array is; C- and Fortran-ordered blocks (and dimensions of one
    element, whatever their stride) are taken."""
    d = offload.omp_target_alloc(256, 0)
    init = offload.omp_get_initial_device()

    def view(shape, byte_strides):
        if kind == "cai":
            return CAIArray(d, shape, np.int32, strides=byte_strides)
        return DLPackArray(d, shape, np.int32, strides=tuple(b // 4 for b in byte_strides))
    try:
        gaps = view((8,), (8,))
        with pytest.raises(OffloadError, match=r"non-contiguous device array \(shape \(8,\), "
                                               r"strides \(8,\) bytes\)"):
            offload.target(add_one.add_one, gaps, 0, 8, device=0)
        src = np.arange(8, dtype=np.int32)
        assert offload.omp_target_memcpy(gaps, src, 32, 0, 0, 0, init) == -1
        assert "non-contiguous device array" in capsys.readouterr().err
        if kind == "cai":                     # no mask: the interface says consumers refuse
            masked = view((8,), (4,))
            masked.mask = CAIArray(d, (8,), np.bool_)
            with pytest.raises(OffloadError, match="a masked array"):
                offload.target(add_one.add_one, masked, 0, 8, device=0)
        if kind == "cai":                     # the interface's strides, one per dimension
            with pytest.raises(OffloadError, match=r"1 strides \(4,\) for 2 dimensions"):
                offload.target(add_one.add_one, view((4, 8), (4,)), 0, 8, device=0)
        for shape, strides in (((4, 8), (32, 4)), ((4, 8), (4, 16)), ((1, 8), (999, 4))):
            ok = view(shape, strides)
            assert offload.omp_target_memcpy(ok, np.arange(32, dtype=np.int32)[:math.prod(shape)],
                                             math.prod(shape) * 4, 0, 0, 0, init) == 0
    finally:
        offload.omp_target_free(d, 0)


@pytest.mark.parametrize("kind", ["cai", "dlpack", "own"])
def test_a_foreign_array_its_producer_marked_read_only_is_no_copy_destination(rt, capsys,
                                                                                kind):
    """An immutable producer's array (JAX exports read-only DLPack 1.x tensors; the
    interface's data[1]; offload's own export of a read-only host array) is refused as
    omp_target_memcpy's destination, as a read-only host array is, and read as a source."""
    d = offload.omp_target_alloc(64, 0)
    init = offload.omp_get_initial_device()
    host = np.arange(16, dtype=np.int32)
    host.flags.writeable = False
    try:
        with offload.target_data(offload.to(host), device=0):
            ro = {"cai": lambda: CAIArray(d, (16,), np.int32, read_only=True),
                  "dlpack": lambda: DLPackArray(d, (16,), np.int32, read_only=True),
                  "own": lambda: offload.device_array(host, 0)}[kind]()
            src = np.full(16, 5, dtype=np.int32)
            assert offload.omp_target_memcpy(ro, src, 64, 0, 0, 0, init) == -1
            assert "the destination is read-only" in capsys.readouterr().err
            back = np.zeros(16, dtype=np.int32)
            assert offload.omp_target_memcpy(back, ro, 64, 0, 0, init, 0) == 0
            if kind == "own":                               # the device copy, unchanged
                assert back.tolist() == list(range(16))
    finally:
        offload.omp_target_free(d, 0)


def test_foreign_array_named_as_host_memory_is_refused(rt, add_one, capsys):
    d = offload.omp_target_alloc(64, 0)
    try:
        init = offload.omp_get_initial_device()
        host = np.zeros(16, dtype=np.int32)
        assert offload.omp_target_memcpy(host, CAIArray(d, (16,), np.int32), 64, 0, 0,
                                         init, init) == -1
        assert "names the initial device" in capsys.readouterr().err
        with pytest.raises(OffloadError, match="runs on the initial device"):
            offload.target(add_one.add_one, CAIArray(d, (16,), np.int32), 0, 16,
                           device=init)
    finally:
        offload.omp_target_free(d, 0)


def test_producer_stream_is_waited_for_before_use(rt, add_one):
    """CAI v3: the consumer orders itself after the stream the producer names; DLPack:
    we ask for the legacy default stream (1) and wait on it."""
    waited = []
    dlpack.register_stream_waiter(waited.append)
    d = offload.omp_target_alloc(64, 0)
    try:
        offload.target(add_one.add_one, CAIArray(d, (16,), np.int32, stream=0xabc), 0, 16,
                       device=0)
        assert waited == [0xabc]
        foreign = DLPackArray(d, (16,), np.int32)
        out = np.zeros(16, dtype=np.int32)
        offload.omp_target_memcpy(out, foreign, 64, 0, 0, offload.omp_get_initial_device(), 0)
        assert foreign.asked == [1] and waited == [0xabc, 1]
        with pytest.raises(OffloadError, match="stream 0 is disallowed"):
            offload.target(add_one.add_one, CAIArray(d, (16,), np.int32, stream=0), 0, 16,
                           device=0)
    finally:
        dlpack.unregister_stream_waiter(waited.append)
        offload.omp_target_free(d, 0)


def test_stream_handed_out_runs_a_region(rt, add_one):
    a = np.zeros(10, dtype=np.int32)
    with offload.stream(0) as s:
        assert isinstance(s.handle, int) and s.__cuda_stream__() == (0, s.handle)
        offload.target(add_one.add_one, a, 0, 10, map=[offload.tofrom(a)], device=0, stream=s)
        assert (a == 1).all()
        with pytest.raises(OffloadError, match="stream= must be an open offload.Stream of the"):
            offload.target(add_one.add_one, a, 0, 10, device=1, stream=s)
    assert offload.stream(offload.omp_get_initial_device()).handle == 0


def test_wait_stream_takes_handles_and_refuses_junk(rt):
    offload.wait_stream(offload.stream(0), 0)     # an offload Stream: synchronized
    offload.wait_stream(5, 0)                      # host plugin: nothing asynchronous
    with pytest.raises(OffloadError, match="expected a raw stream handle"):
        offload.wait_stream("stream", 0)
    with pytest.raises(OffloadError, match="expected a raw stream handle"):
        offload.wait_stream(-1, 0)


def test_pinned_exports_its_memory(rt):
    a = np.arange(1024, dtype=np.float64)
    with offload.lock(a, device=0) as pin:
        assert pin.__dlpack_device__() == (dlpack.KDL_CPU, 0)   # host plugin: plain CPU
        v = np.from_dlpack(pin)
        assert v.ctypes.data == a.ctypes.data and v[5] == 5.0


def test_waiters_of_dead_plugins_drop_out(rt):
    """A plugin registers its bound method weakly: once the plugin is gone (or was only
    probed), foreign arrays are not handed to it."""
    calls = []

    class Plugin:
        def wait(self, stream):
            calls.append(stream)

    p = Plugin()
    dlpack.register_stream_waiter(p.wait)
    dlpack.foreign_pointer(CAIArray(64, (1,), np.int8, stream=7))
    assert calls == [7]
    del p
    dlpack.foreign_pointer(CAIArray(64, (1,), np.int8, stream=8))
    assert calls == [7]


def test_a_stream_dropped_unclosed_is_given_back(rt, add_one):
    """A Queue dropped without close() goes back to its device (it was never given
    back: one new queue, a CUDA stream on a GPU, per dropped Queue)."""
    dev = offload.runtime.current().manager.get_device(0).generic
    a = np.zeros(64, dtype=np.int32)
    for _ in range(50):
        q = offload.stream(0)
        offload.target(add_one.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)],
                       stream=q)
        q.synchronize()
        del q                                             # not closed
    assert a[0] == 50
    assert len(dev.queues.made) <= 2
