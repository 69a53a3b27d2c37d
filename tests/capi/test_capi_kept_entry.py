"""The library's entry for kept regions in the compiled core (offload/accel_c/hot.c,
hot_regions' compiled twin), called as the library's C body calls it, on stand-ins: it
runs a region's kept step with the map arrays, and only while every check of
hot_regions.find holds; anything else is KERNEL_GENERAL with the step never called, and
a step that raises becomes the export's failure through `failed`. (test_capi_hot_regions
runs it through the library's exports.)"""
import ctypes
import types

import pytest

import offload
from offload import _accel
from offload.capi import hot_regions

GENERAL = 7                                 # the library's "nothing done" (any value)
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                         ctypes.c_int32, ctypes.c_int32, ctypes.c_size_t, ctypes.c_uint64,
                         ctypes.c_int32, *[ctypes.c_size_t] * 5)
KEY = (0, 0x4000, 0, 0, 1000)               # device, region, teams, threads, trip count
ARRAYS = (0x100, 0x200, 0x300, 0x400, 0)    # bases, begins, sizes, types, mappers


class World:
    """Stand-ins for what the checks read, a recording step and `failed`."""

    def __init__(self, core):
        self.core, self.steps, self.failures = core, [], []
        self.rt = types.SimpleNamespace(closing=False)
        self.process = types.SimpleNamespace(live=self.rt)
        self.registry = types.SimpleNamespace(version=3)
        self.ompt = types.SimpleNamespace(listening=False)
        self.profile = types.SimpleNamespace(active=None)
        self.gen = types.SimpleNamespace(arena=None)
        self.inject, self.answer, self.failed_answer = set(), True, -1
        core.hot_setup(self.process, self.registry, self.ompt, self.profile, self.inject,
                       self.failed, GENERAL, self.failed, b"beu")
        self.entry = ENTRY(core.hot_address())

    def step(self, *args):
        self.steps.append(args)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def failed(self, loc, export, exc):
        self.failures.append((loc, export, exc))
        if isinstance(self.failed_answer, BaseException):
            raise self.failed_answer
        return self.failed_answer

    def keep(self, key=KEY, extra=("spec", 5, None)):
        self.core.hot_keep(*key, self.step, extra, self.rt, self.gen, self.registry.version)

    def launch(self, key=KEY, n=3, loc=0x77, export=2):
        dev, region, teams, threads, trip = key
        return self.entry(loc, export, dev, teams, threads, region, trip, n, *ARRAYS)


@pytest.fixture
def world():
    core = _accel.load()
    if core is None:
        pytest.skip("no compiled core (OFFLOAD_ACCEL=0, or none builds here): nothing is kept in C")
    w = World(core)
    yield w
    core.hot_forget()
    if hot_regions._connected:             # the library's own setup back
        core.hot_setup(*hot_regions._connected)


def test_a_kept_region_runs_its_step_on_the_map_arrays(world):
    world.keep()
    ran = world.core.hot_ran()
    assert world.launch() == 0
    assert world.steps == [(3, *ARRAYS, "spec", 5, None)]
    assert world.core.hot_ran() == ran + 1


@pytest.mark.parametrize("field", range(5))
def test_a_launch_unlike_the_kept_one_in_any_field_is_not_run(world, field):
    world.keep()
    other = list(KEY)
    other[field] += 1
    assert world.launch(tuple(other)) == GENERAL
    assert world.steps == []


CHECKS = {
    "another runtime live": lambda w: setattr(w.process, "live", object()),
    "no runtime live": lambda w: setattr(w.process, "live", None),
    "the runtime closing": lambda w: setattr(w.rt, "closing", True),
    "a program registered": lambda w: setattr(w.registry, "version", 4),
    "an OMPT tool": lambda w: setattr(w.ompt, "listening", True),
    "a profile": lambda w: setattr(w.profile, "active", object()),
    "a kernel recording": lambda w: setattr(w.gen, "arena", object()),
    "an injected failure": lambda w: w.inject.add("__tgt_target_kernel"),
    "an attribute gone": lambda w: delattr(w.registry, "version"),
}


@pytest.mark.parametrize("change", CHECKS)
def test_each_change_that_makes_a_kept_region_untrue_stops_it(world, change):
    """hot_regions.find's checks, made by the entry on the same objects: none holding,
    the step never runs; all holding again, it runs."""
    world.keep()
    CHECKS[change](world)
    assert world.launch() == GENERAL
    assert world.steps == []


@pytest.mark.parametrize("answer", [False, None, (1, 2, 3, 4)])
def test_a_step_that_did_nothing_sends_the_launch_the_python_way(world, answer):
    """launch_present_map's False (the caller launches), None (the general rules) and a
    section to map first: KERNEL_GENERAL, so the library's Python path runs it. A region
    whose step needs a section mapped first is let go (the next launch is not tried
    here); the others stay kept (their data may be mapped again)."""
    world.answer = answer
    world.keep()
    ran = world.core.hot_ran()
    assert world.launch() == GENERAL
    assert len(world.steps) == 1 and world.core.hot_ran() == ran
    assert world.launch() == GENERAL
    assert len(world.steps) == (1 if isinstance(answer, tuple) else 2)


def test_a_step_that_raises_is_the_exports_failure(world):
    exc = RuntimeError("launch failed")
    world.answer, world.failed_answer = exc, -1
    world.keep()
    assert world.launch(loc=0x1234, export=5) == -1
    assert world.failures == [(0x1234, 5, exc)]
    assert exc.__traceback__ is not None             # as raised, for the report


def test_a_failure_handler_that_raises_still_fails_the_export(world, monkeypatch):
    seen = []
    monkeypatch.setattr("sys.unraisablehook", seen.append)
    world.answer, world.failed_answer = RuntimeError("launch"), KeyError("report")
    world.keep()
    assert world.launch() == -1                      # OFFLOAD_FAIL, never "nothing done"
    assert [type(u.exc_value) for u in seen] == [KeyError]


def test_a_region_kept_again_replaces_it_and_forget_empties_every_slot(world):
    world.keep(extra=("first",))
    world.keep(extra=("second",))
    assert world.launch() == 0 and world.steps[-1][-1] == "second"
    world.core.hot_forget()
    assert world.launch() == GENERAL and len(world.steps) == 1


def test_a_kept_region_takes_at_most_four_arguments_after_the_arrays(world):
    with pytest.raises(ValueError, match="at most 4"):
        world.keep(extra=(1, 2, 3, 4, 5))
    with pytest.raises(TypeError):
        world.core.hot_keep(*KEY, world.step, [1], world.rt, world.gen, 3)   # not a tuple
    assert world.launch() == GENERAL


def test_a_step_that_forgets_every_region_while_running_is_safe(world):
    """The slot emptied (its step and arguments let go) while its step runs: the run
    keeps its own references."""
    def step(*args):
        world.core.hot_forget()
        world.steps.append(args)
        return True
    world.core.hot_keep(*KEY, step, ("x" * 3,), world.rt, world.gen, 3)
    del step
    assert world.launch() == 0 and world.steps == [(3, *ARRAYS, "xxx")]


# ---- data constructs of one plain section (offload_hot_data) ------------------------------
DATA_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                              ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int64, ctypes.c_uint64)
KINDS = {"begin": 0, "end": 1, "update": 2}     # export numbers of this test's b"beu"


@pytest.fixture
def data(world, runtime):
    """(world, launch(kind, base, begin, size, type, dev=0) -> answer, table): device 0's
    data constructs kept with recording steps; `table` the real table whose compiled step
    stands for it (its `observed`)."""
    runtime(OFFLOAD_ACCEL="1")
    table = offload.runtime.current().device(0).table
    if table.steps.present_map is None:
        pytest.skip("no compiled core here: nothing is kept in C")

    def step(kind):
        def run(*args):
            world.steps.append((kind, *args))
            if isinstance(world.answer, BaseException):
                raise world.answer
        return run
    assert world.core.hot_keep_data(0, step("begin"), step("end"), step("update"),
                                    table.steps.present_map, world.rt, world.registry.version)
    entry = DATA_ENTRY(world.core.hot_data_address())

    def launch(kind, base=0x1000, begin=0x1000, size=64, type=0x3, dev=0):
        return entry(0x99, KINDS[kind], dev, base, begin, size, type)
    yield world, launch, table
    table.traced = False


@pytest.mark.parametrize("kind", KINDS)
def test_a_kept_data_construct_runs_its_step_on_the_section(data, kind):
    world, launch, _ = data
    ran = world.core.hot_data_ran()
    assert launch(kind, type=0x1 | 0x20) == 1
    args = (0x1000, 64, 1) + ((None,) if kind != "update" else ())
    assert world.steps == [(kind, *args)] and world.core.hot_data_ran() == ran + 1


@pytest.mark.parametrize("why, row", [
    ("not from its base", dict(begin=0x1008)), ("no bytes", dict(size=0)),
    ("a bit besides TO/FROM/PARAM", dict(type=0x3 | 0x4)),       # always
    ("another device", dict(dev=1)), ("no device number", dict(dev=-1)),
    ("an update both ways", dict(type=0x3))])
def test_a_data_construct_the_core_does_not_take_is_left_to_python(data, why, row):
    world, launch, _ = data
    kind = "update" if why == "an update both ways" else "begin"
    assert launch(kind, **row) == 0 and world.steps == [], why


DATA_CHECKS = [c for c in CHECKS if c not in ("a profile", "a kernel recording")]  # launches'


@pytest.mark.parametrize("change", [*DATA_CHECKS, "an observed table"])
def test_each_change_that_makes_a_kept_device_untrue_stops_it(data, change):
    world, launch, table = data
    if change == "an observed table":
        table.traced = True
    else:
        CHECKS[change](world)
    assert launch("begin") == 0 and world.steps == []


def test_a_kept_data_construct_that_raises_is_reported_as_data_one_reports_it(data):
    world, launch, _ = data
    world.answer, world.failed_answer = RuntimeError("copy failed"), None
    assert launch("end", type=0x2) == 1                    # done: failed and reported
    assert [(loc, export) for loc, export, _ in world.failures] == [(0x99, 1)]
