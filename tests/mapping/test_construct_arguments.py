"""A construct's arguments of the wrong kind are refused with a message naming
the value and the fix, never a raw TypeError or a silent default."""
import numpy as np
import pytest

import offload
from offload.testing import state


@pytest.mark.parametrize("bad", [None, "clause", 0], ids=["None", "str", "int"])
def test_target_map_must_be_a_list(rt, add_one, bad):
    a = np.zeros(4, dtype=np.int32)
    with pytest.raises(offload.OffloadError, match=r"target: map: expected a list of map "
                                                   r"clauses, got .*write map=\[tofrom\(a\)\]"):
        offload.target(add_one.add_one, a, 0, 4, map=bad, device=0)
    assert state()["devices"].get(0, {"mappings": 0})["mappings"] == 0


def test_target_map_given_one_clause_not_in_a_list(rt, add_one):
    a = np.zeros(4, dtype=np.int32)
    with pytest.raises(offload.OffloadError, match="got MapClause"):
        offload.target(add_one.add_one, a, 0, 4, map=offload.tofrom(a), device=0)
    offload.target(add_one.add_one, a, 0, 4, map=[offload.tofrom(a)], device=0)
    assert (a == 1).all()


@pytest.mark.parametrize("make", ["fortran", "column"])
def test_an_array_in_another_element_order_is_refused_for_a_pointer(rt, add_one, make):
    """A Fortran-ordered array (contiguous, so it maps) would reach a C pointer parameter in
    column order, silently; a strided view would give the kernel its first element only.
    Both are refused, also after a C-ordered array of the same dtype was accepted."""
    offload.target(add_one.scale, np.ones(6), 6, 2.0, device=0)         # accepted kind
    a = np.zeros((3, 4), order="F") if make == "fortran" else np.zeros((4, 4))[:, 1]
    with pytest.raises(offload.OffloadError, match="expected a C-ordered .*ascontiguousarray"):
        offload.target(add_one.scale, a, a.size, 2.0, device=0)
    assert (a == 0).all() and state()["devices"][0]["mappings"] == 0


def test_the_quick_paths_pass_each_argument_as_given(rt):
    """A region of one clause whose only argument is not the mapped array passes that
    argument (a number; a float to a pointer parameter is refused by name), and a region
    on its mapped array alone passes the array's device address; through the quick paths
    as through the general ones."""
    k = offload.compile_c("static long seen;\n"
                          "void take(long v) { seen = v; }\n"
                          "void report(long *out) { out[0] = seen; }\n"
                          "void keep(long *p) { p[1] = (long)p; }\n")
    a = np.zeros(4, dtype=np.int64)
    offload.target(k.take, 7, map=[offload.tofrom(a)], device=0)
    offload.target(k.report, a, map=[offload.tofrom(a)], device=0)
    assert a[0] == 7
    offload.target(k.keep, a, map=[offload.tofrom(a)], device=0)
    assert a[1] != 0 and a[1] != a.ctypes.data               # the device copy's address
    with pytest.raises(offload.OffloadError, match="report"):
        offload.target(k.report, 1.5, map=[offload.tofrom(a)], device=0)
    assert state()["devices"][0]["mappings"] == 0


def test_a_region_of_one_array_calls_its_host_kernel_directly(rt, monkeypatch):
    """A single-range region whose only argument is its array calls the host kernel with
    the device address (GenericDevice.direct_call: no launch step); a region with more
    arguments, or a kernel taking a char (converted), goes through `launch`; both compute
    the same."""
    k = offload.compile_c("void inc(int *a) { for (int i = 0; i < 4; i++) a[i] += 1; }\n"
                          "void add(int *a, int v) { for (int i = 0; i < 4; i++) a[i] += v; }\n"
                          "void addc(int *a, char v) { a[0] += v; }\n")
    gen = offload.runtime.current().device(0).generic
    launched = []
    real = gen._launch_impl
    monkeypatch.setattr(gen, "_launch_impl", lambda k, *rest: (launched.append(k.name),
                                                               real(k, *rest))[1])
    a = np.zeros(4, dtype=np.int32)
    offload.target(k.inc, a, map=[offload.tofrom(a)], device=0)
    assert launched == [] and (a == 1).all()
    offload.target(k.add, a, 2, map=[offload.tofrom(a)], device=0)
    offload.target(k.addc, a, 3, map=[offload.tofrom(a)], device=0)
    assert launched == ["add", "addc"] and list(a) == [6, 3, 3, 3]
    with pytest.raises(offload.OffloadError, match="shared_mem=-1"):      # launch's check
        offload.target(k.inc, a, map=[offload.tofrom(a)], device=0, shared_mem=-1)
    assert list(a) == [6, 3, 3, 3] and state()["devices"][0]["mappings"] == 0
