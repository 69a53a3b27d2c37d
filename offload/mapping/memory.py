"""One device's memory as its mapping table and its `Device` reach it: allocations, frees
and copies through the plugin's table, each told to a tool (offload.tracing: LLVM's DeviceTy
hooks). The one place those hooks are written; the fewer-steps paths of an unobserved
table (MappingTable.begin_single_range/end_single_range and the compiled core) tell no one
and reach the GenericDevice directly."""
from __future__ import annotations

from typing import Any

from .. import tracing
from ..plugins.common import AllocKind, GenericPlugin


class DeviceMemory:
    """The memory of device `local_id` of `plugin` (global number `number`)."""

    __slots__ = ("plugin", "local_id", "number")

    def __init__(self, plugin: GenericPlugin, local_id: int, number: int):
        self.plugin = plugin
        self.local_id = local_id
        self.number = number

    def alloc(self, size: int, kind: AllocKind = AllocKind.DEVICE, host: int = 0) -> int:
        """`size` bytes of `kind`; `host`: the host memory they will map (0: none)."""
        with tracing.alloc(self.number, host, size) as op:
            op.dst = addr = self.plugin.data_alloc(self.local_id, size, kind)
        return addr

    def free(self, addr: int, kind: AllocKind = AllocKind.DEVICE, idle: bool = False) -> None:
        """Free device memory; `idle`: no queued work uses it any more (no wait)."""
        with tracing.delete(self.number, addr):
            self.plugin.data_delete(self.local_id, addr, kind, idle)

    def submit(self, tgt: int, host: int, size: int, queue: Any = None) -> None:
        """Host -> device (without a queue: arrived on return)."""
        with tracing.submit(self.number, tgt, host, size):
            self.plugin.data_submit(self.local_id, tgt, host, size, queue)

    def retrieve(self, host: int, tgt: int, size: int, queue: Any = None) -> None:
        """Device -> host (without a queue: arrived on return)."""
        with tracing.retrieve(self.number, host, tgt, size):
            self.plugin.data_retrieve(self.local_id, host, tgt, size, queue)
