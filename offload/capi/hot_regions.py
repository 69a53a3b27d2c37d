"""Regions the C API ran on mapped data, kept by their launch (device number as given,
region, num_teams, thread_limit, trip count) so that the next launch of the same region
skips the general lookups (capi/kernels.py runs it): its device, kernel and plan are
what they were while the device number still names that device, no program
(un)registered and nothing watches (an OMPT tool, a profile, a recording; the compiled
core refuses an observed table itself). Every launch still finds its map list on mapped
data in the core, or runs the general way."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ..plugins.accel_specs import OmpLaunchPlan
from . import ompt
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
    """Remember how region `key` ran on device `d` just now."""
    if len(_HOT) >= KEPT:
        _HOT.clear()
    _HOT[key] = HotRegion(d, registry.version, plan, call, nargs)


def forget() -> None:
    """Every kept region (tests)."""
    _HOT.clear()
