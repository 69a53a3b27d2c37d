"""A zero-size array wherever an array goes (clauses, kernel arguments,
updates, copies, exports, nowait work) does nothing, fails nowhere, and leaves nothing.
A zero-size kernel argument not inside a mapping is NULL, as LLVM's getTargetPointer
gives an absent zero-length section (it was refused: 'no longer mapped (another thread
unmapped it)')."""
import numpy as np
import pytest

import offload
from offload.testing import state

CLAUSES = [offload.to, offload.from_, offload.tofrom, offload.alloc]


def _empty():
    s = state()
    assert all(d == {"mappings": 0, "allocations": 0} for d in s["devices"].values()), s
    assert s["pins"]["host"]["entries"] == 0 and s["pending"] == 0, s


@pytest.fixture
def z():
    return np.zeros(0, np.int32)


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.__name__)
def test_zero_size_in_a_data_region_and_as_a_kernel_argument(rt, add_one, z, clause):
    with offload.target_data(clause(z), device=0):
        offload.target(add_one.add_one, z, 0, 0, device=0)
        offload.target_update(to=[z], from_=[z], device=0)
    offload.target(add_one.add_one, z, 0, 0, device=0, map=[clause(z)])
    offload.target(add_one.add_one, z, 0, 0, device=0, map=[clause(z)], nowait=True)
    offload.taskwait()
    offload.target_enter_data(clause(z) if clause is not offload.from_ else offload.to(z),
                              device=0)
    offload.target_exit_data(offload.from_(z), device=0)
    _empty()


def test_a_zero_size_argument_is_null_or_inside_its_mapping(rt, z):
    m = offload.compile_c("#include <stdint.h>\n"
                          "void where(int *p, int64_t *out) { out[0] = (int64_t)p; }\n")
    out = np.zeros(1, np.int64)
    offload.target(m.where, z, out, device=0, map=[offload.from_(out)])
    assert out[0] == 0                                      # absent: NULL
    a = np.arange(16, dtype=np.int32)
    with offload.target_data(offload.to(a), device=0):
        e = a[4:4]                        # (numpy may give it a[0]'s address)
        offload.target(m.where, e, out, device=0, map=[offload.from_(out)])
        assert out[0] == offload.omp_get_mapped_ptr(a, 0) + (e.ctypes.data - a.ctypes.data)
    _empty()


def test_zero_size_copies_exports_and_allocations(rt, z):
    host = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy(z, z, 0, 0, 0, 0, host) == 0
    offload.memcpy_async(z, z, 0, dst_device=0).wait()
    offload.memset_async(z, 0, 0, device=0).wait()
    assert offload.empty(0, np.int32, device=0).shape == (0,)
    assert offload.omp_target_alloc(0, 0) == 0                  # as LLVM: NULL, no error
    with offload.target_data(offload.tofrom(z), device=0):
        view = offload.device_array(z, 0)
        assert np.from_dlpack(view).shape == (0,) and view.ptr == 0
    with pytest.raises(offload.OffloadError, match="size must be positive"):
        offload.lock(z, device=0)
    _empty()
