"""The routes a copy takes, read from a device's byte counters (GenericDevice.stats):
one rule for offload.stats and the profile."""
from __future__ import annotations

from collections.abc import Mapping

ROUTES = ("pinned", "staged", "pageable", "host", "peer")


def by_route(counters: Mapping[str, int], word: str, host_memory: bool,
             suffix: str = "") -> dict[str, int]:
    """Bytes (suffix " ops": operations) by route in direction `word` ("to"/"from"):
    staged ones are counted as unpinned too, and the rest of the unpinned are a memcpy
    on the host plugin (`host`), a pageable driver copy elsewhere."""
    staged = counters[f"{word} staged{suffix}"]
    out = dict.fromkeys(ROUTES, 0)
    out["pinned"] = counters[f"{word} pinned{suffix}"]
    out["staged"] = staged
    out["host" if host_memory else "pageable"] = counters[f"{word} unpinned{suffix}"] - staged
    return out
