"""Public helpers for tests: `state()` (docs/design.md §5: counts, never the runtime's objects)
and `run_conformance()`, the plugin contract any plugin package can check in its own CI."""
from __future__ import annotations

from typing import Any

from ..runtime import current as _current


def state() -> dict[str, Any]:
    """The runtime's live state, as plain numbers.

    ``{"devices": {n: {"mappings", "allocations"}}, "pins": {plugin: {"entries",
    "bytes", "locked_pages"}}, "pending": int, "operations": int}``: live mapping
    entries and device allocations (pooled free blocks not counted) per initialised
    device, pinned-map entries and bytes and the pages a plugin counts as locked by
    itself, per plugin, unfinished nowait work, and operations counted in flight (0
    when nothing runs: shutdown waits for them). Starts the runtime if none is live.
    """
    rt = _current()
    devices = {}
    for dev in rt.manager.initialized():
        devices[dev.number] = {"mappings": len(dev.table),
                               "allocations": dev.generic.live_allocations()}
    pins = {}
    for plugin in rt.manager.plugins:
        entries = plugin.pinned.entries()
        pins[plugin.name] = {"entries": len(entries),
                             "bytes": sum(e.size for e in entries),
                             "locked_pages": plugin.locked_pages()}
    return {"devices": devices, "pins": pins, "pending": rt.nowait.pending(),
            "operations": rt.busy()}


from .conformance import ConformanceError, run_conformance  # noqa: E402

__all__ = ["ConformanceError", "run_conformance", "state"]
