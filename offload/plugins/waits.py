"""How the plugins wait for a device: a spin, then short sleeps, with a pending Ctrl-C
delivered between them (Interrupts). The policy is here, once; a vendor gives its
query and its not-ready code."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SPIN_SECONDS = 100e-6      # the vendor's C helpers spin this long (without the GIL)
_SPIN_MAX = 2e-3           # poll() spins on until this long, then sleeps between polls
_SLEEP_MAX = 100e-6        # of at most this long


class Interrupts:
    """How a plugin's long waits notice Ctrl-C: the runtime installs `hook`, which raises
    KeyboardInterrupt in the main thread when one is pending; waits call `deliver()`."""

    hook: Callable[[], None] | None = None

    @staticmethod
    def deliver() -> None:
        hook = Interrupts.hook
        if hook is not None:
            hook()


def poll(query: Callable[[Any], int], handle: Any, not_ready: int,
         spin: Callable[[Any, float], int] | None = None) -> int:
    """Poll query(handle) (a driver's stream or event query) until it is not `not_ready`:
    a spin of 2 ms (a pending Ctrl-C is delivered every 100 µs), then sleeps of 50 µs,
    then 100 µs. A sleep lasts at least the thread's timer slack (50 µs on Linux), so the
    spin is what keeps a 0.1-2 ms kernel's wait short; the sleeps keep Ctrl-C reaching a
    hung kernel. `spin(handle, seconds)`, where the vendor has one, spins in C without the
    GIL for 100 µs at a time (else each query takes the GIL back: threads that wait starve
    the threads that work). Returns the last result."""
    rc = query(handle)
    if rc != not_ready:
        return rc                       # done already: no clock read
    now = time.perf_counter()
    until, check = now + _SPIN_MAX, now + SPIN_SECONDS
    if spin is not None:
        while (rc := spin(handle, SPIN_SECONDS)) == not_ready:
            if time.perf_counter() >= until:
                break
            Interrupts.deliver()
    else:
        while (rc := query(handle)) == not_ready:
            now = time.perf_counter()
            if now >= check:
                if now >= until:
                    break
                Interrupts.deliver()
                check = now + SPIN_SECONDS
    delay = 50e-6
    while rc == not_ready:
        Interrupts.deliver()
        time.sleep(delay)
        delay = _SLEEP_MAX
        rc = query(handle)
    return rc
