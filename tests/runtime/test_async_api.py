"""Dependences on nowait work, the async and fill functions of OpenMP's
device API with their C conventions and Pythonic twins, ompx_dump_mapping_tables and
use_device_ptr / use_device_addr. Host plugin; rules from LLVM's offload/test/api
(omp_target_memcpy_async1.c, omp_target_memcpy_async2.c, omp_target_memset.c,
ompx_dump_mapping_tables.cpp) and mapping/use_device_ptr tests."""
import threading
import time

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.testing import state

@pytest.fixture
def dev(rt):
    return 0


def test_memcpy_async_completes_by_taskwait(dev):
    """omp_target_memcpy_async1.c: host -> device -> host, each after the last."""
    n = 1 << 16
    src = np.arange(n, dtype=np.int32)
    out = np.zeros(n, dtype=np.int32)
    d = offload.omp_target_alloc(src.nbytes, dev)
    init = offload.omp_get_initial_device()
    h1 = offload.memcpy_async(d, src, src.nbytes, dst_device=dev)
    assert offload.omp_target_memcpy_async(out, d, src.nbytes, 0, 0, init, dev, 1, [h1]) == 0
    offload.taskwait()
    assert (out == src).all()
    offload.omp_target_free(d, dev)


def test_dependences_order_a_chain(dev):
    """Each step waits for the one before, on workers: the caller is not blocked."""
    gate = threading.Event()
    order = []
    h0 = offload.host_task(lambda: (gate.wait(5), order.append("first")))
    h1 = offload.host_task(order.append, "second", depend=[h0])
    h2 = offload.host_task(order.append, "third", depend=[h1, h0])
    time.sleep(0.05)
    assert order == [] and not h2.done()             # nothing ran before the gate
    gate.set()
    h2.wait()
    assert order == ["first", "second", "third"]


def test_a_failed_dependence_fails_its_dependents(dev):
    def boom():
        raise OffloadError(ErrorCode.INVALID_VALUE, "boom")
    h0 = offload.host_task(boom)
    ran = []
    h1 = offload.host_task(ran.append, 1, depend=[h0])
    with pytest.raises(OffloadError, match="dependence 0 failed.*boom") as e:
        h1.wait()
    assert e.value.code is ErrorCode.INVALID_VALUE and ran == []
    with pytest.raises(OffloadError):
        h0.wait()


def test_depend_on_constructs(dev, add_one):
    a = np.zeros(1000, dtype=np.int32)
    h0 = offload.target_enter_data(offload.to(a), device=dev, nowait=True)
    h1 = offload.target(add_one.add_one, a, 0, a.size, device=dev, nowait=True, depend=[h0])
    h2 = offload.target_update(from_=[a], device=dev, nowait=True, depend=[h1])
    h3 = offload.target_exit_data(offload.release(a), device=dev, nowait=True, depend=[h2])
    h3.wait()
    offload.taskwait()
    assert (a == 1).all() and state()["devices"][dev]["mappings"] == 0
    # a synchronous construct with depend= waits for them first
    h = offload.host_task(a.fill, 5)
    offload.target(add_one.add_one, a, 0, a.size, map=[offload.tofrom(a)], device=dev,
                   depend=[h])
    assert (a == 6).all()


def test_depend_must_be_handles(dev, add_one):
    a = np.zeros(4, dtype=np.int32)
    with pytest.raises(OffloadError, match=r"depend\[0\]: expected a Handle"):
        offload.target(add_one.add_one, a, 0, 4, device=dev, depend=[42])
    with pytest.raises(OffloadError, match="expected a list of Handles"):
        offload.target_update(to=[a], device=dev, depend="h")
    assert state()["devices"][dev]["mappings"] == 0


def test_async_bad_arguments_fail_at_once(dev, capsys):
    a = np.zeros(8, dtype=np.int32)
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy_async(a, a, 64, 0, 0, init, init, 0, None) == -1
    assert "lie past the end of its 32-byte buffer" in capsys.readouterr().err
    assert offload.omp_target_memcpy_async(a, a, 8, 0, 0, init, init, 2, []) == -1
    assert "depobj_count is 2 but depobj_list has 0" in capsys.readouterr().err
    assert offload.omp_target_memcpy_async(a, a, 8, 0, 0, init, init, 1, None) == -1
    assert "depobj_list is None" in capsys.readouterr().err
    assert offload.omp_target_memcpy_async(a, a, 8, 0, 0, init, init, 1, ["x"]) == -1
    assert "expected a Handle" in capsys.readouterr().err
    with pytest.raises(OffloadError, match="memcpy_async: length"):
        offload.memcpy_async(a, a, -1)
    assert state()["pending"] == 0


def test_memcpy_rect_async(dev):
    """omp_target_memcpy_rect_async: a 2x3 block of a 4x5 array, through the device."""
    src = np.arange(20, dtype=np.int32).reshape(4, 5)
    d = offload.omp_target_alloc(src.nbytes, dev)
    out = np.zeros_like(src)
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy_rect_async(d, src, 4, 2, [4, 5], [0, 0], [0, 0], [4, 5],
                                                [4, 5], dev, init, 0, None) == 0
    offload.taskwait()
    assert offload.omp_target_memcpy_rect_async(out, d, 4, 2, [2, 3], [1, 1], [1, 1], [4, 5],
                                                [4, 5], init, dev) == 0
    offload.taskwait()
    want = np.zeros_like(src)
    want[1:3, 1:4] = src[1:3, 1:4]
    assert (out == want).all()
    assert offload.omp_target_memcpy_rect_async(None, None, 4, 2, [1, 1], [0, 0], [0, 0],
                                                [1, 1], [1, 1], init, init) > 2 ** 30
    offload.omp_target_free(d, dev)


def test_memset_on_a_device_and_the_host(dev, capsys):
    """omp_target_memset.c: fill device memory, read it back; returns the pointer."""
    n = 1 << 20
    d = offload.omp_target_alloc(n, dev)
    assert offload.omp_target_memset(d, 0xAB, n, dev) == d
    back = np.zeros(n, dtype=np.uint8)
    offload.omp_target_memcpy(back, d, n, 0, 0, offload.omp_get_initial_device(), dev)
    assert (back == 0xAB).all()
    assert offload.omp_target_memset(d, 1, n + 1, dev) == 0      # past its allocation
    assert "run past the end" in capsys.readouterr().err
    host = np.ones(100, dtype=np.uint8)
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memset(host, 7, 50, init) == host.ctypes.data
    assert (host[:50] == 7).all() and (host[50:] == 1).all()
    assert offload.omp_target_memset(host, 7, 101, init) == 0
    assert "past the end of its 100-byte buffer" in capsys.readouterr().err
    assert offload.omp_target_memset(host, 7, 0, init) == host.ctypes.data
    offload.omp_target_free(d, dev)


def test_memset_async_and_its_twin(dev):
    n = 4096
    d = offload.omp_target_alloc(n, dev)
    h = offload.memset_async(d, 3, n, device=dev)
    back = np.zeros(n, dtype=np.uint8)
    h2 = offload.memcpy_async(back, d, n, src_device=dev, depend=[h])
    h2.wait()
    assert (back == 3).all()
    assert offload.omp_target_memset_async(d, 9, n, dev, 1, [h2]) == d
    offload.taskwait()
    offload.omp_target_memcpy(back, d, n, 0, 0, offload.omp_get_initial_device(), dev)
    assert (back == 9).all()
    offload.omp_target_free(d, dev)


def test_memset_fallback_copies_a_filled_buffer(recording):
    """A device without a fill hook gets one through copies (the generic layer)."""
    d = offload.omp_target_alloc(1000, 0)
    recording.device(0)._fill_impl = lambda *a: False
    assert offload.omp_target_memset(d, 0x5A, 1000, 0) == d
    back = np.zeros(1000, dtype=np.uint8)
    offload.omp_target_memcpy(back, d, 1000, 0, 0, offload.omp_get_initial_device(), 0)
    assert (back == 0x5A).all()
    offload.omp_target_free(d, 0)


def test_dump_mapping_tables(dev, capsys):
    """ompx_dump_mapping_tables.cpp: LLVM's text on stdout, every line prefixed."""
    a = np.zeros(10, dtype=np.int32)
    offload.target_enter_data(offload.to(a), device=dev)
    offload.ompx_dump_mapping_tables()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("omptarget device 0 info: OpenMP Host-Device pointer mappings after "
                      "block at libomptarget:0:0:")
    assert f"0x{a.ctypes.data:016x}" in out[2] and " 40 " in out[2]
    offload.target_exit_data(offload.release(a), device=dev)
    offload.ompx_dump_mapping_tables()
    assert capsys.readouterr().out.strip() == (
        "omptarget device 0 info: OpenMP Host-Device pointer mappings table empty")


def test_use_device_ptr_and_addr(dev):
    a = np.arange(100, dtype=np.int32)
    b = np.zeros(10, dtype=np.float64)
    view = a[20:]
    with offload.target_data(offload.tofrom(a[10:50]), device=dev,
                             use_device_ptr=[view], use_device_addr=[b]) as d:
        base = offload.omp_get_mapped_ptr(a[10:], dev)
        assert d[view] == base + 40                    # inside the mapping: its address
        assert d[b] == b.ctypes.data                   # not mapped: the host address
        with pytest.raises(KeyError, match="not listed"):
            d[a]
    with pytest.raises(OffloadError, match="use_device_ptr: expected a list"):
        offload.target_data(offload.tofrom(a), use_device_ptr=a)
    with offload.target_data(device=offload.omp_get_initial_device(),
                             use_device_ptr=[a]) as d:
        assert d[a] == a.ctypes.data


# ---- strided and non-contiguous target update (LLVM's offload/test/offloading/
# non_contiguous_update.cpp and strided_update tests) -----------------------------------
@pytest.mark.parametrize("view", [lambda a: a[:, 3], lambda a: a[::2],
                                  lambda a: a[1:3, 2:5], lambda a: a[::-1, ::2],
                                  lambda a: a.T[2:4]])
@pytest.mark.parametrize("plugin", ["host", "recording", "pitched"])
def test_strided_update_moves_exactly_the_view(runtime, view, plugin):
    runtime(OFFLOAD_PLUGINS=plugin)
    a = np.arange(48, dtype=np.float64).reshape(6, 8)
    with offload.target_data(offload.to(a), device=0):
        a[:] = -1                                     # the host copy changes ...
        offload.target_update(from_=[view(a)], device=0)
        want = np.full((6, 8), -1.0)
        view(want)[...] = view(np.arange(48, dtype=np.float64).reshape(6, 8))
        assert (a == want).all()                      # ... only the view came back
        b = np.zeros_like(a)                          # and to the device:
        view(a)[...] = 100
        offload.target_update(to=[view(a)], device=0)
        offload.omp_target_memcpy(b, offload.omp_get_mapped_ptr(a, 0), a.nbytes, 0, 0,
                                  offload.omp_get_initial_device(), 0)
        want2 = np.arange(48, dtype=np.float64).reshape(6, 8)
        view(want2)[...] = 100
        assert (b == want2).all()


def test_strided_update_rows_not_elements(recording, runtime):
    """A 2-D block copies row by row through the generic layer (one copy per row of
    contiguous bytes), never per element."""
    a = np.zeros((64, 1024), dtype=np.float32)            # rows of 4 KiB
    with offload.target_data(offload.to(a), device=0):
        before = len(recording.calls)
        offload.target_update(from_=[a[:, 256:768]], device=0)
        copies = [c for c in recording.calls[before:] if c[0] == "retrieve"]
    assert len(copies) == 64 and all(c[2] == 2048 for c in copies)


def _pitched(runtime):
    return runtime(OFFLOAD_PLUGINS="pitched").plugins[0]


@pytest.mark.parametrize("lock", [False, True])
def test_strided_update_one_2d_copy_per_block(runtime, lock):
    """A column block is one 2-D copy (cuMemcpy2DAsync on CUDA) of its rows, straight
    from the host rows, whether the array is pinned or not (below staging's threshold)."""
    plugin = _pitched(runtime)
    a = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)      # rows of 4 KiB
    orig = a.copy()
    with offload.target_data(offload.to(a), device=0):
        if lock:
            offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
        a[:] = -1
        before = len(plugin.calls)
        offload.target_update(from_=[a[:, 256:768]], device=0)
        calls = plugin.calls[before:]
        assert [c for c in calls if c[0] in ("copy2d", "retrieve")] ==             [("copy2d", False, a.ctypes.data + 1024, 4096, 2048, 64, lock)]
        want = np.full_like(a, -1)
        want[:, 256:768] = orig[:, 256:768]
        assert (a == want).all()
        stats = offload.runtime.current().manager.get_device(0).stats
        assert stats["from pinned" if lock else "from unpinned"] >= 64 * 2048
        if lock:
            offload.llvm_omp_target_unlock_mem(a, 0)


def test_strided_update_three_dimensional_is_one_2d_copy_per_plane(runtime):
    plugin = _pitched(runtime)
    a = np.arange(4 * 8 * 16, dtype=np.int64).reshape(4, 8, 16)
    orig = a.copy()
    with offload.target_data(offload.to(a), device=0):
        a[:] = 0
        before = len(plugin.calls)
        offload.target_update(from_=[a[1:3, ::2, 4:12]], device=0)
        copies = [c for c in plugin.calls[before:] if c[0] == "copy2d"]
        assert [(c[4], c[5]) for c in copies] == [(64, 4), (64, 4)]
        want = np.zeros_like(a)
        want[1:3, ::2, 4:12] = orig[1:3, ::2, 4:12]
        assert (a == want).all()


@pytest.mark.parametrize("to_device", [False, True])
def test_strided_update_large_unpinned_blocks_go_packed_through_staging(runtime, to_device):
    """Unpinned blocks over the staging threshold are packed into pinned buffers on the
    host and moved as 2-D copies between the buffers (rows back to back) and the device."""
    plugin = _pitched(runtime)
    a = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)    # 2 MiB, rows 4 KiB
    orig = a.copy()
    with offload.target_data(offload.to(a), device=0):
        before = len(plugin.calls)
        if to_device:
            a[:, 100:900] = 7
            offload.target_update(to=[a[:, 100:900]], device=0)
            a[:] = 0
            offload.target_update(from_=[a], device=0)
            want = orig.copy()
            want[:, 100:900] = 7
        else:
            a[:] = -1
            offload.target_update(from_=[a[:, 100:900]], device=0)
            want = np.full_like(a, -1)
            want[:, 100:900] = orig[:, 100:900]
        assert (a == want).all()
        copies = [c for c in plugin.calls[before:] if c[0] == "copy2d"
                  and c[1] == to_device]
        assert len(copies) == -(-512 // (64 * 1024 // 3200))          # whole rows per buffer
        assert all(c[3] == 3200 and c[4] == 3200 for c in copies)     # packed: pitch = width
        assert sum(c[5] for c in copies) == 512


def test_strided_update_refused_2d_copy_goes_row_by_row(runtime):
    plugin = _pitched(runtime)
    plugin.refuse_2d = 1
    a = np.arange(16 * 64, dtype=np.float64).reshape(16, 64)
    orig = a.copy()
    with offload.target_data(offload.to(a), device=0):
        a[:] = 0
        before = len(plugin.calls)
        offload.target_update(from_=[a[:, 8:40]], device=0)
        rows = [c for c in plugin.calls[before:] if c[0] == "retrieve"]
        assert len(rows) == 16 and all(c[2] == 256 for c in rows)
        want = np.zeros_like(a)
        want[:, 8:40] = orig[:, 8:40]
        assert (a == want).all()


def test_strided_update_absent_present_and_errors(dev):
    a = np.zeros((4, 4))
    offload.target_update(from_=[a[:, 1]], device=dev)           # absent: nothing
    with pytest.raises(OffloadError, match="not present on device 0"):
        offload.target_update(from_=[offload.from_(a[:, 1], present=True)], device=dev)
    ro = np.zeros((4, 4))
    with offload.target_data(offload.to(ro), device=dev):
        ro.flags.writeable = False
        with pytest.raises(OffloadError, match="read-only"):
            offload.target_update(from_=[ro[:, 1]], device=dev)
    with pytest.raises(OffloadError, match="non-contiguous"):
        offload.target_enter_data(offload.to(a[:, 1]), device=dev)  # mapping one: an error


# ---- allocators (DESIGN §5 `empty`; LLVM's llvm_omp_target_alloc_host/shared/device) ----
@pytest.mark.parametrize("kind", ["host", "shared"])
def test_empty_host_and_shared_are_numpy_arrays_freed_when_they_die(dev, kind):
    import gc
    offload.omp_target_free(offload.omp_target_alloc(8, dev), dev)   # device in use
    before = state()["devices"][dev]["allocations"]
    a = offload.empty((3, 4), np.int32, device=dev, kind=kind)
    assert isinstance(a, np.ndarray) and a.shape == (3, 4) and a.dtype == np.int32
    assert state()["devices"][dev]["allocations"] == before + 1
    a[:] = 7
    view = a[1:]
    del a
    gc.collect()
    assert state()["devices"][dev]["allocations"] == before + 1   # a view keeps it
    assert (view == 7).all()
    del view
    gc.collect()
    assert state()["devices"][dev]["allocations"] == before


def test_empty_device_is_a_device_array(dev):
    import gc
    d = offload.empty(16, np.float32, device=dev, kind="device")
    assert isinstance(d, offload.DeviceArray) and d.nbytes == 64 and d.shape == (16,)
    src = np.arange(16, dtype=np.float32)
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy(d.ptr, src, 64, 0, 0, dev, init) == 0
    assert (np.from_dlpack(d) == src).all()                       # host plugin: kDLCPU
    before = state()["devices"][dev]["allocations"]
    del d
    gc.collect()
    assert state()["devices"][dev]["allocations"] == before - 1


def test_empty_pinned_trait_is_honoured(recording, runtime):
    """omp_atk_pinned: kind="default" memory is page-locked for the device while it lives
    (LLVM ignores the trait's value), copies of it take the pinned path, and the pin goes
    when the last view dies; contradictory requests are refused."""
    import gc
    a = offload.empty((256, 64), np.float64, device=0, kind="default", pinned=True)
    assert a.ctypes.data % 4096 == 0 and a.shape == (256, 64)
    locks = recording.of("lock")
    assert locks and locks[-1][2:4] == (a.ctypes.data, a.nbytes)
    a[:] = 1.5
    with offload.target_data(offload.tofrom(a), device=0):
        pass
    assert [c for c in recording.of("submit") if c[1] == a.ctypes.data][-1][3] is True
    b = offload.empty(64, np.int32, device=0, kind="default", pinned=False)
    assert len(recording.of("lock")) == len(locks)                # not pinned
    view = a[10:]
    del a
    gc.collect()
    assert not recording.of("unlock")                             # a view keeps it
    del view
    gc.collect()
    assert len(recording.of("unlock")) == 1
    del b
    for kwargs, msg in (({"kind": "host", "pinned": False}, "always pinned"),
                        ({"kind": "device", "pinned": True}, "never pinned"),
                        ({"kind": "default", "pinned": "yes"}, "expected True, False"),
                        ({"kind": "default", "pinned": True,
                          "device": offload.omp_get_initial_device()}, "needs a device")):
        with pytest.raises(OffloadError, match=msg):
            offload.empty(4, **kwargs)


def test_empty_on_the_initial_device_and_bad_input(dev):
    init = offload.omp_get_initial_device()
    a = offload.empty((2, 2), device=init)
    assert isinstance(a, np.ndarray) and a.dtype == np.float64
    for kwargs, msg in (({"device": init, "kind": "device"}, "no device memory"),
                        ({"kind": "pinned"}, "kind 'pinned'"),
                        ({"dtype": object}, "Python objects"),
                        ({"dtype": "nope"}, "not a dtype")):
        with pytest.raises(OffloadError, match=msg):
            offload.empty(4, **kwargs)
    with pytest.raises(OffloadError, match="non-negative integers"):
        offload.empty((2, -1))
    a = offload.empty(8, device=dev)
    offload.shutdown()
    del a                                    # freed with the runtime: nothing raises
