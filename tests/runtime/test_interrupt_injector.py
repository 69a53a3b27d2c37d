"""A deterministic interrupt injector over the public operations and every
context manager. A Ctrl-C is made pending (as offload's deferring SIGINT handler makes
it) at the Nth call into the plugin, for every N a scenario reaches; the operation
finishes and raises KeyboardInterrupt as it returns. Whatever N, the scenario's own
cleanup of what it got back then leaves `offload.testing.state()` empty, nothing
locked, and the runtime usable: an operation is never cut in half, and one that hands
back a resource (a pin, an entered region, an allocation, a queue) gives it back when
the interrupt comes as it returns, since its caller never got it."""
import numpy as np
import pytest

import offload
from offload import runtime as rtmod
from offload.plugins.common import GenericPlugin
from tests.interrupt_support import SCENARIOS, assert_empty, cleanup

#: the plugin calls an interrupt may follow
CHECKS = sorted(n for n in vars(GenericPlugin)
                if n.startswith(("data_", "launch")) and callable(getattr(GenericPlugin, n)))


class Injector:
    """Counts plugin calls; makes a Ctrl-C pending after the `at`-th (0: never)."""

    def __init__(self, monkeypatch, at):
        self.at, self.calls = at, 0
        for name in CHECKS:
            real = getattr(GenericPlugin, name)
            monkeypatch.setattr(GenericPlugin, name, self._wrap(real))

    def _wrap(self, real):
        def call(*args, **kwargs):
            try:
                return real(*args, **kwargs)
            finally:
                self.calls += 1
                if self.calls == self.at:
                    rtmod._Sigint.pending = True    # arrived while the call ran
        return call


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_an_interrupt_after_any_plugin_call_leaves_nothing(runtime, monkeypatch, add_one,
                                                           scenario):
    runtime()
    a = np.zeros(1 << 14, dtype=np.int32)
    at = 0
    while True:              # at = 1, 2, ... until a run ends before the at-th call
        at += 1
        assert at < 200, "the scenario never ends"
        inj = Injector(monkeypatch, at)
        got: dict = {}
        try:
            scenario(a, add_one, got)
        except KeyboardInterrupt:
            assert inj.calls >= at, at          # only after the injection
        finally:
            rtmod._Sigint.pending = False
            monkeypatch.undo()
        cleanup(a, got)
        assert_empty(f"interrupt after plugin call {at} (of {inj.calls})")
        if inj.calls < at:
            break
    assert at > 1, "the scenario reached no plugin call"
    with offload.locked(a, device=0):                       # the runtime still works
        offload.target(add_one.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)])
    assert_empty("after")


def test_an_interrupt_during_a_finalizers_free_is_not_lost(runtime, monkeypatch):
    """An `empty` array's memory is freed by a finalizer; a Ctrl-C that arrives while it
    frees cannot propagate there (Python ignores a finalizer's exceptions: it was lost),
    so it stays pending and the next operation raises it."""
    runtime()
    e = offload.empty(1024, np.float64, device=0)
    Injector(monkeypatch, 1)
    try:
        del e                                               # the free, interrupted
        assert rtmod._Sigint.pending
        with pytest.raises(KeyboardInterrupt):
            offload.omp_get_num_devices()
        assert not rtmod._Sigint.pending
    finally:
        rtmod._Sigint.pending = False
        monkeypatch.undo()
    assert_empty("after")
