"""Test double: a pin driver for PinnedMap with no memory behind it."""
from __future__ import annotations

from offload.errors import ErrorCode, OffloadError


class FakeDriver:
    """Records pins per device; checks the first/last flags the map passes."""

    def __init__(self, external=()):
        self.pinned = {}            # (host, size) -> set of devices
        self.calls = []
        self.external = list(external)
        self.fail_next = False

    def pin(self, device, host, size, first, read_only):
        self.calls.append(("pin", device, host, size, first))
        if self.fail_next:
            self.fail_next = False
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "injected")
        devs = self.pinned.setdefault((host, size), set())
        assert first == (not devs), "first flag must mean no device pinned it yet"
        assert device not in devs
        devs.add(device)
        return host + 0x1000_0000 * (device + 1)

    def unpin(self, device, host, size, last):
        self.calls.append(("unpin", device, host, size, last))
        devs = self.pinned[(host, size)]
        devs.remove(device)
        assert last == (not devs)
        if not devs:
            del self.pinned[(host, size)]

    def query(self, host, size):
        for base, n in self.external:
            if base <= host and host + size <= base + n:
                return base, n, base + 0x7000_0000
        return None

    def pin_is_read_only(self, host):
        return False
