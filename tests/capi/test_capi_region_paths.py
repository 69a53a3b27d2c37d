"""Which path the drop-in's kernel regions take (issue 29): an empty list or one plain
section read in C (kernel_one: the section mapped in fewer steps, the host kernel called
directly), a list on mapped data marked, translated and launched by the compiled core
(present_map / launch_present_map), one section mapped nowhere mapped first; anything
else, and anything watched, by the general rules. Asserted by counting the calls,
in-process through the exports' bodies, with and without the compiled core."""
import ctypes

import numpy as np
import pytest

import offload
from tests.capi_support import WHY, ours  # noqa: F401 - fixture
from tests.capi_support import count as _count

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")


REGIONS = r'''
void bump(int *a) {
#pragma omp target map(tofrom: a[0:1000])
  a[0] += 1;
}
int empty(void) {
  int on_host = 1;
#pragma omp target map(from: on_host)
  on_host = 0;
  return on_host;
}
'''


@pytest.mark.parametrize("watch", [None, "info", "traced"])
def test_regions_of_one_plain_section_through_the_c_body(spied, watch, monkeypatch):
    """A region whose map list is one plain section (its fields read by the C body,
    kernel_one: the C arrays are never decoded in Python) maps it in fewer steps and runs;
    on an observed table it takes the general rules (which print and report); either way
    the result is the same."""
    from offload.capi import maps
    table, calls, _ = spied
    _count(monkeypatch, calls, maps, "decode")
    if watch == "info":
        table.info = 0x20
    elif watch == "traced":
        table.traced = True
    m = offload.compile_openmp(REGIONS)
    a = np.zeros(1000, dtype=np.int32)
    for _ in range(3):
        m.bump(a)
    assert a[0] == 3 and not a[1:].any()
    assert m.empty() == 0                        # ran on the device, not the host fallback
    fewer = (calls.get("begin_single_range", 0), calls.get("end_single_range", 0))
    general = (calls.get("target_data_begin", 0), calls.get("target_data_end", 0))
    if watch is None:
        assert fewer == (4, 4) and general == (0, 0) and "decode" not in calls, calls
    else:
        assert fewer == (0, 0) and general == (4, 4) and calls["decode"] == 4, calls
    assert len(table) == 0


def test_a_region_of_one_section_calls_the_host_kernel_directly(spied, monkeypatch):
    """kernel_one's plain section on the host calls the kernel with the section's device
    address (GenericDevice.omp_direct_call): no omp_launch step. A num_teams clause or a
    kernel recording sends it through omp_launch; the result is the same."""
    from offload.capi import kernels
    _, calls, _ = spied
    gen = offload.runtime.current().device(0).generic
    _count(monkeypatch, calls, gen, "_omp_launch_impl", "launch")
    m = offload.compile_openmp(REGIONS + TEAMS)
    a = np.zeros(1000, dtype=np.int32)
    m.bump(a)
    assert a[0] == 1 and "launch" not in calls, calls
    m.bump_teams(a)
    assert a[0] == 11 and calls["launch"] == 1, calls
    # a kernel of no arguments: its direct call binds dyn_ptr, whether or not omp_launch
    # has run it (each is kept by its own key)
    m.nothing()
    program, name = kernels._kernel(offload.runtime.current().device(0),
                                    _region(m, "nothing"))
    gen.omp_direct_call(program, name, 0, 0, 0)()
    monkeypatch.setattr(gen, "arena", object())        # as a kernel recording watches
    assert gen.omp_direct_call(None, "bump", 1, 0, 0) is None


def _region(m, function):
    """The region id (its host entry's address) of the one region in `function` of m."""
    from offload.capi.devices import registry
    found = [k for k, (_, e) in registry.kernels.items() if f"_{function}_l" in e.name]
    assert len(found) == 1, found
    return found[0]


TEAMS = r'''
void nothing(void) {
#pragma omp target
  { }
}
void bump_teams(int *a) {
#pragma omp target teams num_teams(1) map(tofrom: a[0:1000])
  a[0] += 10;
}
'''


ON_MAPPED = r'''
void enter(int *a, int *b, int n) {
#pragma omp target enter data map(to: a[0:n], b[0:n])
}
void leave(int *a, int *b, int n) {
#pragma omp target exit data map(from: a[0:n], b[0:n])
}
void pointers(int *a, int *b, int k) {
#pragma omp target
  { b[k] = a[k] + 1; }
}
void sections(int *a, int *b) {
#pragma omp target map(tofrom: a[10:20], b[0:5])
  { b[0] = a[10]; }
}
void always(int *a, int *b) {
#pragma omp target map(always, tofrom: a[0:1000]) map(to: b[0:1000])
  { a[1] = b[1]; }
}
void loose(int *a, int *b) {
#pragma omp target
  { a[2] = b[0]; }
}
'''


def test_regions_on_mapped_data_take_one_step(spied, monkeypatch):
    """A kernel region whose every component lies inside a made mapping (pointers into it
    as zero-length sections, sections inside it, literals; no bit that copies) is marked,
    translated and launched through the compiled core's present_map, its map arrays never
    decoded in Python; `always` and a pointer into unmapped memory take the general rules;
    the pure-Python core maps every list by the general rules; the results agree."""
    from offload import _accel
    from offload.capi import hot_regions, kernels, maps
    table, calls, _ = spied
    taken = []
    step = table.steps.present_map
    compiled = _accel.load() is not None and offload.runtime.current().config.accel
    assert (step is not None) == compiled           # the compiled core's step is there
    if step is not None:
        def present_map(*args):
            found = step(*args)
            taken.append(found is not None)
            return found
        monkeypatch.setattr(table, "steps", table.steps._replace(present_map=present_map))

    _count(monkeypatch, calls, maps, "decode")
    _count(monkeypatch, calls, kernels, "_run_kernel", "run")
    _count(monkeypatch, calls, kernels, "_run_kept", "hot")
    hot_regions.forget()
    m = offload.compile_openmp(ON_MAPPED)
    a = np.arange(1000, dtype=np.int32)
    b = np.zeros(1000, dtype=np.int32)
    m.enter(a, b, 1000)
    busy = [e.busy for e in table.entries()]
    for k in range(3):
        m.pointers(a, b, k)
    m.sections(a, b)
    assert [e.busy for e in table.entries()] == busy          # every mark given back
    m.always(a, b)
    loose = np.full(4, 9, dtype=np.int32)
    m.loose(a, loose)                       # not mapped: the host pointer, the general rules
    m.leave(a, b, 1000)
    assert b[0] == 10 and list(b[1:3]) == [2, 3] and a[1] == b[1] and a[2] == 9
    assert len(table) == 0
    # decoded: the enter and exit data constructs (two components each), and the regions
    # the general rules took
    if step is None:
        assert calls["decode"] == 2 + 6 and calls["run"] == 6 and "hot" not in calls, calls
    else:   # the second and third `pointers` from what the first kept (hot_regions)
        assert taken == [True] * 4 + [False] * 2 and calls["decode"] == 2 + 2, (taken, calls)
        assert calls["run"] == 4 and calls["hot"] == 2, calls


REDUCTION = r'''
void enter(int *a, int *b, int n) {
#pragma omp target enter data map(to: a[0:n], b[0:n])
}
void leave(int *a, int *b, int n) {
#pragma omp target exit data map(release: a[0:n], b[0:n])
}
long dot(int *a, int *b, int n) {
  long sum = 5;
#pragma omp target teams distribute parallel for map(tofrom: sum) reduction(+: sum)
  for (int i = 0; i < n; i++) sum += (long)a[i] * b[i];
  return sum;
}
'''


@pytest.mark.parametrize("race", [False, True])
def test_a_reduction_on_mapped_arrays_maps_its_scalar_first(spied, monkeypatch, race):
    """A region on mapped arrays with one new scalar (BabelStream's Dot: map(tofrom: sum)
    and a reduction) maps the scalar in fewer steps and runs the rest as a region on
    mapped data, its map arrays never decoded in Python. When the list is no longer on
    mapped data once the scalar is mapped (`race`: an array unmapped meanwhile), the
    scalar's mapping is undone and the general rules run the region; the sum is right
    either way and nothing stays mapped. The pure-Python core maps the list by the
    general rules."""
    from offload.capi import maps
    table, calls, _ = spied
    compiled = table.steps.present_map is not None
    if race and not compiled:
        pytest.skip("no compiled core in this mode: no present_map step to race")
    if race:                                  # the second look finds the list not mapped
        step, looks = table.steps.present_map, []

        def present_map(*args):
            looks.append(1)
            return step(*args) if len(looks) == 1 else None
        monkeypatch.setattr(table, "steps", table.steps._replace(present_map=present_map))
    _count(monkeypatch, calls, maps, "decode")
    m = offload.compile_openmp(REDUCTION)
    a = np.arange(100, dtype=np.int32)
    b = np.full(100, 2, dtype=np.int32)
    m.enter(a, b, 100)
    assert m.dot(a, b, 100) == 5 + 2 * 99 * 100 // 2
    m.leave(a, b, 100)
    fewer = (calls.get("begin_single_range", 0), calls.get("end_single_range", 0))
    general = (calls.get("target_data_begin", 0), calls.get("target_data_end", 0))
    assert len(table) == 0
    if not compiled:                          # every list by the general rules
        assert fewer == (0, 0) and general == (2, 2) and calls["decode"] == 3, calls
        return
    assert fewer == (1, 1), calls
    # decoded: enter and exit, and (race) the region the general rules took
    assert general == (1 + race, 1 + race) and calls["decode"] == 2 + race, calls


def test_present_map_refuses_what_it_must_not_take(runtime):
    """The compiled core's present_map step alone, on LLVM 19's map arrays: a list inside
    made mappings comes back as the kernel's arguments with the mappings marked; a list
    with one section mapped nowhere (sharing no byte with the others) comes back as that
    component; every list it must leave to the general rules (a bit that copies or
    attaches, a mapper, a section past its mapping, an absent pointer, two absent
    sections, an observed table) comes back None with nothing marked; malformed calls
    raise."""
    from offload import _accel
    from offload.clauses import MapItem, MapType
    runtime()
    table = offload.runtime.current().device(0).table
    if table.steps.present_map is None:
        pytest.skip("no compiled core in this mode (OFFLOAD_ACCEL=0 or no C compiler): "
                    "the general rules map every list")
    assert _accel.load() is not None
    a = np.zeros(100, dtype=np.int64)
    p = a.ctypes.data
    table.target_data_begin([MapItem(p, a.nbytes, MapType.TO)])
    e = table.lookup(p, a.nbytes)

    def call(rows, mappers=None):
        n = len(rows)
        bases = (ctypes.c_void_p * max(n, 1))(*[r[0] for r in rows])
        begins = (ctypes.c_void_p * max(n, 1))(*[r[1] for r in rows])
        sizes = (ctypes.c_int64 * max(n, 1))(*[r[2] for r in rows])
        types = (ctypes.c_int64 * max(n, 1))(*[r[3] for r in rows])
        m = 0 if mappers is None else ctypes.addressof(mappers)
        return table.steps.present_map(n, *(ctypes.addressof(x) for x in
                                            (bases, begins, sizes, types)), m)
    param = 0x20
    found = call([(p, p + 80, 0, param | 0x200),          # a pointer into it, zero-length
                  (7, 7, 0, param | 0x100),                # a literal
                  (p, p + 16, 32, 0x3 | param),            # a section inside it
                  (p, p, 8, 0x1)])                         # not a kernel argument
    assert found is not None and e.busy == 3
    tgt = e.tgt_begin
    assert found.kernel_args == [tgt, 7, tgt] and found.marked == [e, e, e]
    table.steps.release_present(found.marked)
    assert e.busy == 0
    refused = {"always": [(p, p, 8, 0x4 | 0x1 | param)], "delete": [(p, p, 8, 0x8)],
               "ptr_and_obj": [(p, p, 8, 0x10 | param)], "private": [(p, p, 8, 0x80 | param)],
               "past its end": [(p, p + 792, 16, 0x3 | param)],
               "absent": [(p, p, 8, param), (16, 16, 0, param)],
               "member_of": [(p, p, 8, (1 << 48) | 0x3)],
               "negative size": [(p, p, -1, param)]}
    s = np.zeros(2, dtype=np.int64)                        # mapped nowhere
    q = s.ctypes.data
    refused.update({"two absent": [(p, p, 8, param), (q, q, 8, 0x3 | param),
                                   (q + 8, q + 8, 8, 0x3 | param)],
                    "absent, zero-length": [(p, p, 8, param), (q, q, 0, param)]})
    for why, rows in refused.items():
        assert call(rows) is None and e.busy == 0, why
    # one section mapped nowhere (a reduction's scalar), the rest inside mappings: that
    # component, for the caller to map first, with nothing marked
    assert call([(p, p + 80, 0, param), (q, q, 8, 0x3 | param), (7, 7, 0, param | 0x100)]) \
        == (q, q, 8, 0x3 | param) and e.busy == 0
    one = (ctypes.c_void_p * 1)(1)
    assert call([(p, p, 8, param)], one) is None and e.busy == 0           # a mapper
    assert call([(p, p, 8, param)] * 65) is None                           # too many
    table.traced = True                                                    # observed
    assert call([(p, p, 8, param)]) is None
    table.traced = False
    with pytest.raises(TypeError, match="a count and five addresses"):
        table.steps.present_map(1, 2, 3)
    with pytest.raises(TypeError, match="a count and five addresses"):
        table.steps.present_map(1, "bases", 0, 0, 0, 0)
    table.target_data_end([MapItem(p, a.nbytes, MapType.FROM)])
    assert len(table) == 0


def test_launch_present_map_leaves_a_launch_it_cannot_make(runtime):
    """launch_present_map on a device whose launches are not the core's (the host plugin:
    no CUDA copier) returns False with nothing marked (the caller launches); malformed
    calls raise."""
    runtime()
    table = offload.runtime.current().device(0).table
    step = table.steps.launch_present_map
    if step is None:
        pytest.skip("no compiled core in this mode (OFFLOAD_ACCEL=0 or no C compiler): "
                    "the general rules map every list")
    a = np.zeros(8, dtype=np.int64)
    from offload.clauses import MapItem, MapType
    table.target_data_begin([MapItem(a.ctypes.data, a.nbytes, MapType.TO)])
    e = table.lookup(a.ctypes.data, a.nbytes)
    arrays = [(ctypes.c_int64 * 1)(v) for v in (a.ctypes.data, a.ctypes.data, 8, 0x23)]
    args = (1, *(ctypes.addressof(x) for x in arrays), 0)
    assert step(*args, (0, 1, 1, 0, (8, 8), "k", "k"), 0) is False and e.busy == 0
    with pytest.raises(TypeError, match="a LaunchSpec, an int"):
        step(*args, None, "first")
    with pytest.raises(TypeError, match="a LaunchSpec, an int"):
        step(*args)
    table.target_data_end([MapItem(a.ctypes.data, a.nbytes, MapType.FROM)])
