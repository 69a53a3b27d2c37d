"""offload.stats: what each device's copies did, by route, as plain numbers (the counters
the plugins keep; tests read them to check which path a copy took)."""
from __future__ import annotations

from typing import Any

from .errors import ErrorCode, OffloadError
from .routes import ROUTES, by_route
from .runtime import at_shutdown, operation
from .runtime import current as _current


def _routes(generic: Any, suffix: str = "") -> dict[str, dict[str, int]]:
    """By direction, the route counters (bytes; operations with suffix " ops")."""
    return {way: by_route(generic.stats, word, generic.host_memory, suffix)
            for way, word in (("to_device", "to"), ("from_device", "from"))}


def _total(ways: dict[str, dict[str, int]], peer: int) -> dict[str, int]:
    total = {r: ways["to_device"][r] + ways["from_device"][r] for r in ROUTES}
    total["peer"] = peer
    return total


def _one(dev: Any) -> dict[str, Any]:
    g = dev.generic
    ways, ops = _routes(g), _routes(g, " ops")
    pins = [e for e in dev.plugin.pinned.entries() if e.count.get(dev.local_id)]
    return {"bytes": _total(ways, g.stats["peer"]), **ways,
            "operations": _total(ops, g.stats["peer ops"]),
            "operations_by_direction": ops,
            "allocations": g.live_allocations(), "pool_hits": g.stats["pool hits"],
            "pins": {"entries": len(pins), "bytes": sum(e.size for e in pins)}}


@operation
def stats(device: int | None = None) -> dict[Any, Any]:
    """Counters of device `device`, or of every device in use (None: a dict by device
    number): bytes moved by route (`pinned`: from pinned host memory directly; `staged`:
    through staging buffers; `pageable`: a driver copy from pageable memory; `host`: a
    memcpy, on the host plugin; `peer`: to another device), in all (`bytes`) and by
    direction (`to_device`, `from_device`); the copy operations by the same routes
    (`operations`, and `operations_by_direction`); live allocations; allocations the
    device-memory pool served (`pool_hits`); and the pinned ranges this device uses
    (`pins`: `entries`, `bytes`). Plain numbers.

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


def write_stats(rt: Any) -> None:
    """OFFLOAD_STATS=path: every used device's counters, as JSON (when `rt` shuts down, and
    at a C program's end)."""
    path = rt.config.stats_path
    if not path:
        return
    import json
    import os
    out = {str(d.number): {"plugin": d.plugin.name, **_one(d)} for d in rt.manager.initialized()}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"devices": out}, f, indent=1)
    os.replace(tmp, path)


at_shutdown(write_stats)


def format_stats(data: dict[str, Any]) -> str:
    """OFFLOAD_STATS's file as a table (offload-info --stats)."""
    lines = []
    for number, s in sorted(data["devices"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"device {number} ({s['plugin']}): {s['allocations']} live "
                     f"allocation(s), {s['pool_hits']} pool hit(s), {s['pins']['entries']} "
                     f"pinned range(s) ({s['pins']['bytes']} bytes)")
        lines.append(f"  {'route':<10}{'to device':>16}{'from device':>16}{'operations':>12}")
        for r in ROUTES:
            to = s["to_device"].get(r, 0) if r != "peer" else s["bytes"]["peer"]
            back = s["from_device"].get(r, 0) if r != "peer" else 0
            lines.append(f"  {r:<10}{to:>16}{back:>16}{s['operations'][r]:>12}")
    return "\n".join(lines) if lines else "no device was used"
