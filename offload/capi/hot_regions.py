"""Regions the C API ran on mapped data, kept by their launch (device number as given,
region, num_teams, thread_limit, trip count) so that the next launch of the same region
skips the general lookups (capi/kernels.py runs it): its device, kernel and plan are
what they were while the device number still names that device, no program
(un)registered and nothing watches (an OMPT tool, a profile, a recording; the compiled
core refuses an observed table itself). Every launch still finds its map list on mapped
data in the core, or runs the general way.

Where the compiled core builds (connect), each kept region is kept in the core as well
(offload/accel_c/hot.c, this module's compiled twin: the same checks on the same
objects), and the library's C body runs it from there without entering Python code;
what the core does not run comes here."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .. import _accel, config, profile, runtime
from ..plugins.accel_specs import OmpLaunchPlan
from . import devices, ompt
from .devices import device, registry

KEPT = 4096                        # regions kept (then all forgotten)
#: (device number as given, region id, num_teams, thread_limit, trip count)
Key = tuple[int, int, int, int, int]


class HotRegion(NamedTuple):
    """How one region ran: the core launched it (`plan`) or the kernel was called with
    the region's arguments (`call`, taking `nargs` of them: the host)."""

    device: Any                     # the Device its device number named
    version: int                    # registry.version then
    plan: OmpLaunchPlan | None
    call: Callable[..., Any] | None
    nargs: int

    def launch(self, kargs: list[int]) -> bool:
        """The kept call on the region's kernel arguments `kargs`: True once it ran;
        False with nothing run when they are not what it takes."""
        if self.call is None or len(kargs) != self.nargs:
            return False
        self.call(*kargs)
        return True


_HOT: dict[Key, HotRegion] = {}


def find(key: Key) -> HotRegion | None:
    """The region kept for `key`, while still true of it (else forgotten: None)."""
    h = _HOT.get(key)
    if h is None:
        return None
    if h.version != registry.version or ompt.listening or device(key[0]) is not h.device \
            or h.device.generic.omp_watched():
        _HOT.pop(key, None)
        return None
    return h


def keep(key: Key, d: Any, plan: OmpLaunchPlan | None,
         call: Callable[..., Any] | None, nargs: int) -> None:
    """Remember how region `key` ran on device `d` just now (in the core too, once
    connected: the step that runs it, an operation, and what it adds to the map arrays)."""
    if len(_HOT) >= KEPT:
        _HOT.clear()
    _HOT[key] = HotRegion(d, registry.version, plan, call, nargs)
    steps = d.table.steps
    step, extra = ((steps.launch_present_map, (plan.spec, plan.first, plan.scratch))
                   if plan is not None else (steps.call_present_map, (call, nargs)))
    if step is not None and in_core(key[0]):
        _compiled.hot_keep(devices.device_number(key[0]), *key[1:], runtime.operation(step),
                           extra, runtime._process.live, d.generic, registry.version)


def forget() -> None:
    """Every kept region (tests)."""
    _HOT.clear()
    _data_kept.clear()
    if _compiled is not None:
        _compiled.hot_forget()


#: the compiled core once connect() gave the library its entry for kept regions
_compiled: Any = None


def in_core(dev: int) -> bool:
    """Whether a region launched on device number `dev` (as given) is kept in the core:
    connected, and for the default device only where device_number reads it from libomp
    as the library's C does."""
    return _compiled is not None and (dev >= 0 or devices.libomp is not None)


def connect(set_entry: Callable[[int, int], None],
            failed: Callable[[int, int, BaseException], int], general: int,
            inject: set[str], data_failed: Callable[[int, int, BaseException], Any],
            kinds: bytes) -> bool:
    """Give the library (`set_entry`, its offload_set_hot) the compiled core's entries for
    kept regions and data constructs, when the core builds: `failed(loc, export,
    exception)` is what a region's export returns when a kept run raises (`data_failed`
    reports a data construct's), `general` its answer for nothing done, `inject` the
    exports' injected failures (none while the core runs a construct), `kinds` each data
    export's kind (b, e, u). Whether it did."""
    global _compiled
    module = _accel.load() if config.accel_enabled() else None
    if module is None:
        return False
    setup = (runtime._process, registry, ompt, profile, inject, failed, general, data_failed,
             kinds)
    module.hot_setup(*setup)
    set_entry(module.hot_address(), module.hot_data_address())
    _compiled, _connected[:] = module, setup
    return True


def keep_data(dev: int, d: Any) -> None:
    """Keep device `d`'s data constructs of one plain section (data_one's) in the core,
    once per device, runtime and registry version (device number `dev` as given)."""
    steps = d.table.steps
    if steps.present_map is None:
        return
    n = devices.device_number(dev)
    now = (runtime._process.live, registry.version, d)
    if _data_kept.get(n) == now:
        return
    op = runtime.operation
    if _compiled.hot_keep_data(n, op(steps.begin_single_range), op(steps.end_single_range),
                               op(steps.update_single_range), steps.present_map, now[0],
                               now[1]):
        _data_kept[n] = now


#: device number -> (runtime, registry version, Device) its data constructs were kept for
_data_kept: dict[int, tuple[Any, int, Any]] = {}


_connected: list[Any] = []           # what connect gave hot_setup (tests put it back)
