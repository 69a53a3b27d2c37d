"""Ctrl-C and finalizers: Python drops a finalizer's exceptions, so a KeyboardInterrupt
raised in a __del__, a weakref.finalize callback or a DLPack deleter would be lost with
the rest of the finalizer's work (a queue, a block's hold, an event not given back).
Every finalizer of offload is made with interrupts.finalizer: a Ctrl-C in it stays
pending for the next operation. (The class of the Queue.__del__ case that
test_interrupt_checkpoints' injector showed as "Exception ignored in Queue.__del__".)"""
import ast
import importlib
import inspect
import pathlib
import pkgutil
import signal

import pytest

import offload
from offload import interrupts

ROOT = pathlib.Path(offload.__file__).parent


def _modules():
    for info in pkgutil.walk_packages([str(ROOT)], "offload."):
        if ".capi" in info.name or info.name.endswith("__main__"):
            continue                       # the drop-in's modules: loaded by a C program
        try:
            yield importlib.import_module(info.name)
        except Exception:                  # noqa: BLE001 - a vendor binding missing here
            continue


def test_every_del_of_offload_is_a_finalizer():
    found = []
    for mod in _modules():
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and "__del__" in vars(cls):
                found.append(cls.__qualname__)
                assert getattr(cls.__del__, "__offload_finalizer__", False), \
                    f"{mod.__name__}.{cls.__qualname__}.__del__ is not an interrupts.finalizer"
    assert {"Queue", "Event", "Handle"} <= set(found)


def test_every_weakref_finalize_callback_is_a_finalizer():
    """Each weakref.finalize(obj, fn, ...) in offload's source names a module-level
    function made with interrupts.finalizer."""
    sites = 0
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "finalize" and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == "weakref":
                sites += 1
                fn = node.args[1]
                assert isinstance(fn, ast.Name), \
                    f"{path.name}:{node.lineno}: finalize with {ast.unparse(fn)}, not a function"
                name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
                target = getattr(importlib.import_module(name), fn.id)
                assert getattr(target, "__offload_finalizer__", False), \
                    f"{path.name}:{node.lineno}: {fn.id} is not an interrupts.finalizer"
    assert sites >= 4


def test_every_dlpack_deleter_is_a_finalizer():
    from offload import dlpack
    source = (ROOT / "dlpack.py").read_text().splitlines()
    callbacks = [i for i, line in enumerate(source) if line.startswith("@_ffi.callback(")]
    assert callbacks, "no DLPack deleter found"
    for i in callbacks:
        assert source[i + 1] == "@finalizer", f"dlpack.py:{i + 2}: {source[i + 1]}"
    assert dlpack._capsule_destructor.__offload_finalizer__


def test_an_interrupt_in_a_finalizer_stays_pending(monkeypatch):
    """Raised in what the finalizer calls: kept pending, nothing escapes; raised where its
    own frame checks for signals: deferred by the SIGINT handler."""
    monkeypatch.setattr(interrupts._Sigint, "pending", False)
    done = []

    def body():
        done.append("before")
        raise KeyboardInterrupt

    assert interrupts.finalizer(body)() is None
    assert done == ["before"] and interrupts._Sigint.pending
    monkeypatch.setattr(interrupts._Sigint, "pending", False)

    def own_frame():
        interrupts._deferring_sigint(signal.SIGINT, inspect.currentframe())
        done.append("after")

    interrupts.finalizer(own_frame)()
    assert done[-1] == "after" and interrupts._Sigint.pending
    monkeypatch.setattr(interrupts._Sigint, "pending", False)
    with pytest.raises(KeyboardInterrupt):          # unmarked code: raised at once
        interrupts._deferring_sigint(signal.SIGINT, inspect.currentframe())


def test_an_interrupt_while_an_event_is_destroyed_is_not_lost(monkeypatch):
    """Event.__del__ whose event_destroy is interrupted: before, the KeyboardInterrupt
    left the finalizer (and Python dropped it: the user's Ctrl-C lost); now it is pending
    for the next operation."""
    from offload import interop
    calls = []

    class Owner:
        def event_destroy(self, event):
            calls.append(event)
            raise KeyboardInterrupt

    monkeypatch.setattr(interrupts._Sigint, "pending", False)
    ev = interop.Event.__new__(interop.Event)
    ev._owner, ev.event = Owner(), 7
    ev.__del__()
    assert calls == [7] and interrupts._Sigint.pending
    ev._owner = None                                   # the real finalizer: nothing left
    monkeypatch.setattr(interrupts._Sigint, "pending", False)


def test_a_view_finalizer_inside_a_locked_step_neither_deadlocks_nor_loses_the_release():
    """The collector may run a DeviceArray's finalizer (interop._release_block, which
    calls ExportedBlocks.release) inside one of the same object's locked steps (the CI
    hang: release's own step, under the checkpoint injector); the lock is not reentrant,
    so the finalizer runs as the step gives the lock back (offload.locks): the orphaned
    block is freed once, nothing waits."""
    from offload.interop import _release_block
    from offload.plugins.exported import ExportedBlocks
    from tests.harness import background
    freed = []
    blocks = ExportedBlocks(lambda addr, size, kind: freed.append((addr, size)))
    blocks.hold(0x1000)
    assert blocks.adopt(0x1000, 64, None)               # freed by the runtime, still viewed

    class Collecting(dict):
        """_views whose next write runs the view's finalizer, as a collection would."""
        armed = True

        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            if Collecting.armed:
                Collecting.armed = False
                _release_block(blocks, 0x1000)

    blocks._views = Collecting(blocks._views)
    t = background(lambda: blocks.hold(0x2000))          # a locked step of its own
    t.join(10)
    assert not t.is_alive(), "deadlocked: the finalizer waited for its own thread's lock"
    assert freed == [(0x1000, 64)] and len(blocks) == 0
    assert dict(blocks._views) == {0x2000: 1}
