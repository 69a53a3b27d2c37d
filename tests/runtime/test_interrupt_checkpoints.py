"""A real Ctrl-C at every point where Python looks for one. CPython runs a signal's
handler only at its checkpoints: as a Python function starts, and as a call returns to
the frame that made it (the end of a CALL instruction). This injector stops at the Nth
such point the main thread reaches in offload's code (or, for a `with`, in the caller
right after offload hands it the context manager) while no operation is running, and
runs offload's own SIGINT handler there, with that frame, as CPython would; for every N
a scenario reaches. Whatever N, the scenario's careful cleanup leaves nothing: the
interrupt waits for an operation's end, an operation's count is never left behind (the
CI flake of test_fault_injection_with_real_interrupts: shutdown then kept every pin),
and a resource is never handed to a caller that cannot receive it. The window Python
leaves every caller of a function that returns a resource (`p = offload.lock(a)`,
interrupted before the assignment: as `f = open(...)`) is the caller's; those scenarios
skip the one checkpoint where their own frame receives the result. (Checkpoints at loop
back-edges are not modelled: offload's wrapper and context-manager code has no loops.)"""
import dis
import os
import signal
import sys

import numpy as np
import pytest

import offload
from offload import runtime as rtmod
from tests.interrupt_support import SCENARIOS, assert_empty, cleanup

PACKAGE = os.path.dirname(offload.__file__) + os.sep
#: the code every offload finalizer runs in (interrupts.finalizer's wrapper): called by C
#: (a capsule's destructor, the collector), never by the CALL its caller's frame is in
FINALIZER = offload.dlpack._capsule_destructor.__code__
#: scenarios that receive a resource by assignment from a call (the caller's window;
#: not `empty`: an array dropped on the way is freed by its finalizer)
RECEIVES = {"_lock_unlock", "_target_alloc", "_llvm_lock", "_associate", "_rect",
            "_omp_async_and_images", "_pinned_with"}
_CODE: dict = {}


def _layout(code):
    """A code object's CALL offsets and its exception handler by offset."""
    if code not in _CODE:
        calls = {i.offset for i in dis.get_instructions(code) if i.opname.startswith("CALL")}
        entries = dis.Bytecode(code).exception_entries
        _CODE[code] = calls, lambda off: next((e.target for e in entries
                                               if e.start <= off < e.end), None)
    return _CODE[code]


class Checkpoints:
    """A tracer: counts the checkpoints where a Ctrl-C would be raised at once (not in
    an operation, not in a frame that keeps it); at the `at`-th, runs the real handler
    there, which raises KeyboardInterrupt as CPython would. Frames entered inside an
    operation end inside it, so only frames entered outside one are followed. The check
    that ends a CALL is raised from the callee's return when the callee is followed (the
    exception then leaves the CALL itself); else at the caller's next instruction, when
    that is under the same exception handler as the CALL (otherwise it is not modelled:
    `skipped` counts those). A dunder method is called by C code (numpy's from_dlpack
    calls __dlpack__), nor is a finalizer (a capsule's destructor runs inside the
    caller's CALL): their return is not that CALL's end."""

    def __init__(self, at, scenario_code, receives):
        self.at, self.seen, self.fired, self.place, self.skipped = at, 0, False, None, 0
        self.scenario_code, self.receives = scenario_code, receives
        self.called_at: dict = {}           # frame -> offset of the CALL it just made

    def _followed(self, code):
        return code.co_filename.startswith(PACKAGE) or \
            (code is self.scenario_code and not self.receives)

    def _check(self, frame, what):
        if self.fired or rtmod.interrupt_waits(frame):
            return
        self.seen += 1
        if self.seen == self.at:
            self.fired = True
            self.place = (f"{what} in {frame.f_code.co_qualname} "
                          f"({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})")
            sys.settrace(None)
            rtmod._deferring_sigint(signal.SIGINT, frame)     # raises KeyboardInterrupt

    def __call__(self, frame, event, arg):                  # a new frame
        if self.fired or getattr(rtmod._tls, "rt", None) is not None or \
                not self._followed(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        self._check(frame, "start")
        return self._local

    def _local(self, frame, event, arg):
        if self.fired:
            return None
        if event == "opcode":
            code = frame.f_code
            calls, handler = _layout(code)
            at_call = self.called_at.pop(frame, None)
            if at_call is not None:
                if handler(at_call) == handler(frame.f_lasti):
                    self._check(frame, "after a call")
                else:
                    self.skipped += 1
            if frame.f_lasti in calls:
                self.called_at[frame] = frame.f_lasti
        elif event == "return":
            self.called_at.pop(frame, None)
            caller, name = frame.f_back, frame.f_code.co_name
            if caller is not None and not (name.startswith("__") and name.endswith("__")) \
                    and frame.f_code is not FINALIZER \
                    and self.called_at.pop(caller, None) is not None:
                self._check(caller, f"return of {frame.f_code.co_qualname}")
        return self._local


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_a_real_interrupt_at_any_checkpoint_leaves_nothing(python_sigint, runtime, add_one,
                                                            scenario):
    runtime()
    assert signal.getsignal(signal.SIGINT) is rtmod._deferring_sigint
    a = np.zeros(1 << 14, dtype=np.int32)
    at = 0
    while True:              # at = 1, 2, ... until a run ends before the at-th checkpoint
        at += 1
        assert at < 400, "the scenario never ends"
        cp = Checkpoints(at, scenario.__code__, scenario.__name__ in RECEIVES)
        got: dict = {}
        sys.settrace(cp)
        try:
            scenario(a, add_one, got)
        except KeyboardInterrupt:
            assert cp.fired, at
        finally:
            sys.settrace(None)
            rtmod._Sigint.pending = False
        cleanup(a, got)
        assert_empty(f"interrupt at checkpoint {at} (of {cp.seen}): {cp.place}")
        if not cp.fired:
            break
    assert at > 1, "the scenario reached no checkpoint"
    with offload.locked(a, device=0):                       # the runtime still works
        offload.target(add_one.add_one, a, 0, a.size, device=0, map=[offload.tofrom(a)])
    assert_empty("after")
