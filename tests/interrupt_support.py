"""The scenarios the interrupt injectors run (every public operation and context manager
a careful caller uses), what such a caller gives back after a KeyboardInterrupt, and the
check that nothing is left: no mapping, allocation, pin, locked page, nowait work or
operation counted in flight."""
import numpy as np

import offload
from offload.testing import state
from tests.conftest import vmlck_kb


def _locked(a, k, got):
    with offload.locked(a, device=0):
        offload.target(k.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)])


def _pinned_with(a, k, got):
    with offload.lock(a, device=0):
        pass


def _lock_unlock(a, k, got):
    got["pin"] = offload.lock(a, device=0)
    got.pop("pin").unlock()


def _data_region(a, k, got):
    with offload.target_data(offload.tofrom(a), device=0):
        offload.target_update(to=[a], device=0)
        offload.target(k.add_one, a, 0, a.size, device=0)


def _enter_exit(a, k, got):
    got["mapped"] = True
    offload.target_enter_data(offload.to(a), device=0)
    offload.target_update(from_=[a], device=0)
    offload.target_exit_data(offload.from_(a), device=0)
    got.pop("mapped")


def _target_alloc(a, k, got):
    got["ptr"] = offload.omp_target_alloc(a.nbytes, 0)
    offload.omp_target_memcpy(got["ptr"], a, a.nbytes, 0, 0, 0,
                              offload.omp_get_initial_device())
    offload.omp_target_free(got.pop("ptr"), 0)


def _llvm_lock(a, k, got):
    got["llvm_pin"] = offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
    offload.llvm_omp_target_unlock_mem(got.pop("llvm_pin"), 0)


def _stream(a, k, got):
    with offload.stream(0) as q:
        offload.target(k.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)], stream=q)


def _nowait(a, k, got):
    offload.target(k.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)], nowait=True)
    offload.taskwait()


def _empty_array(a, k, got):
    got["empty"] = offload.empty(a.size, a.dtype, device=0)
    got.pop("empty")


def _async_copies(a, k, got):
    with offload.target_data(offload.alloc(a), device=0):
        d = offload.omp_get_mapped_ptr(a, 0)
        h = offload.memset_async(d, 0, a.nbytes, device=0)
        h2 = offload.memcpy_async(d, a, a.nbytes, dst_device=0, depend=[h])
        offload.host_task(lambda: None, depend=[h2]).wait()
        offload.omp_target_memset(d, 1, 64, 0)
        offload.target_update(from_=[a], device=0, nowait=True)
        offload.taskwait()


def _associate(a, k, got):
    got["ptr"] = offload.omp_target_alloc(a.nbytes, 0)
    offload.omp_target_associate_ptr(a, got["ptr"], a.nbytes, 0, 0)
    offload.target(k.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)])
    offload.omp_target_disassociate_ptr(a, 0)
    offload.omp_target_free(got.pop("ptr"), 0)


def _rect(a, k, got):
    got["ptr"] = offload.omp_target_alloc(a.nbytes, 0)
    host = offload.omp_get_initial_device()
    offload.omp_target_memcpy_rect(got["ptr"], a, 4, 2, [64, 64], [0, 0], [0, 0], [64, 64],
                                   [64, 64], 0, host)
    offload.omp_target_free(got.pop("ptr"), 0)


def _queries_and_views(a, k, got):
    offload.devices()
    with offload.target_data(offload.tofrom(a), device=0):
        assert offload.omp_target_is_present(a, 0)
        offload.omp_target_is_accessible(a, a.nbytes, 0)
        np.from_dlpack(offload.device_array(a, 0))[0] += 1
        offload.ompx_dump_mapping_tables()
        got["mapped"] = True
        offload.target_enter_data(offload.to(a), device=0)
        offload.target_exit_data(offload.delete(a), device=0)
        got.pop("mapped")
    offload.omp_set_default_device(0)
    assert offload.omp_get_default_device() == 0


def _omp_async_and_images(a, k, got):
    host = offload.omp_get_initial_device()
    assert offload.omp_is_initial_device() and offload.omp_get_num_devices() >= 1
    img = offload.load_image(k.binaries[0].data)
    got["ptr"] = offload.omp_target_alloc(a.nbytes, 0)
    offload.omp_target_memset_async(got["ptr"], 0, a.nbytes, 0)
    offload.omp_target_memcpy_async(got["ptr"], a, a.nbytes, 0, 0, 0, host)
    offload.omp_target_memcpy_rect_async(a, got["ptr"], 4, 2, [64, 64], [0, 0], [0, 0],
                                         [64, 64], [64, 64], host, 0)
    offload.taskwait()
    offload.target(img.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)])
    offload.wait_stream(offload.stream(0), device=0)
    offload.omp_target_free(got.pop("ptr"), 0)


SCENARIOS = [_omp_async_and_images, _queries_and_views, _async_copies, _associate, _rect, _locked, _pinned_with, _lock_unlock, _data_region, _enter_exit, _target_alloc,
             _llvm_lock, _stream, _nowait, _empty_array]


def cleanup(a, got):
    """What a careful caller does after a KeyboardInterrupt: give back what it holds."""
    offload.taskwait()
    if "pin" in got:
        got.pop("pin").unlock()
    if got.pop("mapped", False) and offload.omp_target_is_present(a, 0):
        offload.target_exit_data(offload.release(a), device=0)
    if "ptr" in got:
        if offload.omp_target_is_present(a, 0):            # still associated
            offload.omp_target_disassociate_ptr(a, 0)
        offload.omp_target_free(got.pop("ptr"), 0)
    if got.get("llvm_pin"):
        offload.llvm_omp_target_unlock_mem(got.pop("llvm_pin"), 0)
    got.clear()


def assert_empty(where):
    s = state()
    assert all(d == {"mappings": 0, "allocations": 0} for d in s["devices"].values()), \
        (where, s)
    assert all(p["entries"] == 0 and p["locked_pages"] == 0 for p in s["pins"].values()), \
        (where, s)
    assert s["pending"] == 0 and s["operations"] == 0, (where, s)
    assert vmlck_kb() == 0, where
