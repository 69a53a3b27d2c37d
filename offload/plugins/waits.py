"""How the plugins wait for a device: a spin, then short sleeps, with a pending Ctrl-C
delivered between them (Interrupts). The policy is here, once; a vendor gives its
query and its not-ready code."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SPIN_SECONDS = 100e-6      # spin on a query this long before sleeping between polls
_SLEEP_MAX = 100e-6        # then sleep at most this long between polls


class Interrupts:
    """How a plugin's long waits notice Ctrl-C: the runtime installs `hook`, which raises
    KeyboardInterrupt in the main thread when one is pending; waits call `deliver()`."""

    hook: Callable[[], None] | None = None

    @staticmethod
    def deliver() -> None:
        hook = Interrupts.hook
        if hook is not None:
            hook()


def poll(query: Callable[[Any], int], handle: Any, not_ready: int) -> int:
    """Poll query(handle) (a driver's stream or event query) until it is not `not_ready`: a spin of
    100 µs (the driver releases the GIL per query), then sleeps of 50 µs, then 100 µs, so
    a pending Ctrl-C is delivered even while a kernel hangs, and a long copy is noticed
    within 0.1 ms of its end (sleeps growing to 1 ms cost a 1 GiB copy 3%). Returns the
    last result."""
    rc = query(handle)
    if rc != not_ready:
        return rc                       # done already: no clock read
    spin_until = time.perf_counter() + SPIN_SECONDS
    while (rc := query(handle)) == not_ready and time.perf_counter() < spin_until:
        pass                            # short copies finish within the spin: no sleep
    delay = 50e-6
    while rc == not_ready:
        Interrupts.deliver()
        time.sleep(delay)
        delay = _SLEEP_MAX
        rc = query(handle)
    return rc
