"""offload.stats: what each device's copies did, by route, as plain numbers (the counters
the plugins keep; tests read them to check which path a copy took)."""
from __future__ import annotations

from typing import Any

from .errors import ErrorCode, OffloadError
from .runtime import current as _current
from .runtime import operation

ROUTES = ("pinned", "staged", "pageable", "host", "peer")


def _routes(generic: Any) -> dict[str, dict[str, int]]:
    s = generic.stats
    unpinned_kind = "host" if generic.host_memory else "pageable"
    out = {}
    for way, word in (("to_device", "to"), ("from_device", "from")):
        staged = s[f"{word} staged"]
        r = dict.fromkeys(ROUTES, 0)
        r["pinned"] = s[f"{word} pinned"]
        r["staged"] = staged
        r[unpinned_kind] = s[f"{word} unpinned"] - staged
        out[way] = r
    return out


def _one(dev: Any) -> dict[str, Any]:
    g = dev.generic
    ways = _routes(g)
    total = {r: ways["to_device"][r] + ways["from_device"][r] for r in ROUTES}
    total["peer"] = g.stats["peer"]
    return {"bytes": total, **ways, "allocations": g.live_allocations()}


@operation
def stats(device: int | None = None) -> dict[Any, Any]:
    """Counters of device `device`, or of every device in use (None: a dict by device
    number): bytes moved by route (`pinned`: from pinned host memory directly; `staged`:
    through staging buffers; `pageable`: a driver copy from pageable memory; `host`: a
    memcpy, on the host plugin; `peer`: to another device), in all (`bytes`) and by
    direction (`to_device`, `from_device`), and live allocations. Plain numbers.

    Example:
        >>> routes = offload.stats(0)["bytes"]     # e.g. routes['staged']
    """
    rt = _current()
    if device is None:
        return {d.number: _one(d) for d in rt.manager.initialized()}
    dev = rt.device(device)
    if dev is None:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"stats: the initial device ({device}) moves nothing")
    return _one(dev)
