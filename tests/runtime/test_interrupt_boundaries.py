"""A Ctrl-C at a `with` boundary leaks nothing. The interrupt offload defers
(it never cuts an operation in half) is delivered as the operation returns; when that
operation handed back a resource (the pin of `locked`, the mappings of a `target_data`
entry), the resource is given back first. Injected deterministically: the interrupt is
made pending inside the operation, as Python's handler would."""
import numpy as np
import pytest

import offload
from offload import runtime as rtmod
from offload.device import Device
from offload.mapping import MappingTable
from offload.testing import state
from tests.conftest import vmlck_kb


def _pending_after(monkeypatch, cls, name):
    real = getattr(cls, name)

    def then_interrupt(*args, **kwargs):
        r = real(*args, **kwargs)
        rtmod._Sigint.pending = True          # a Ctrl-C arrived while it ran
        return r
    monkeypatch.setattr(cls, name, then_interrupt)


def _empty():
    s = state()
    assert all(d["mappings"] == 0 for d in s["devices"].values()), s
    assert all(p["entries"] == 0 for p in s["pins"].values()), s
    assert vmlck_kb() == 0


@pytest.mark.parametrize("how", ["with_locked", "lock"])
def test_an_interrupt_as_a_pin_is_taken_gives_it_back(runtime, monkeypatch, how):
    runtime()
    a = np.zeros(1 << 16, dtype=np.uint8)
    _pending_after(monkeypatch, Device, "lock")
    with pytest.raises(KeyboardInterrupt):
        if how == "with_locked":
            with offload.locked(a, device=0):
                pytest.fail("the block ran after the interrupt")
        else:
            offload.lock(a, device=0)
    monkeypatch.undo()
    _empty()
    with offload.locked(a, device=0):        # the runtime is usable
        pass
    _empty()


def test_an_interrupt_as_a_data_region_is_entered_unmaps_it(runtime, monkeypatch, add_one):
    runtime()
    a = np.arange(64, dtype=np.int32)
    td = offload.target_data(offload.tofrom(a), device=0)
    _pending_after(monkeypatch, MappingTable, "target_data_begin")
    with pytest.raises(KeyboardInterrupt):
        with td:
            pytest.fail("the block ran after the interrupt")
    monkeypatch.undo()
    _empty()
    assert (a == np.arange(64)).all()          # nothing copied back
    with td:                                   # the object is usable again
        offload.target(add_one.add_one, a, 0, 64, device=0)
    assert (a == np.arange(64) + 1).all()
    _empty()
