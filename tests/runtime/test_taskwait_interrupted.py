"""A taskwait returns only once the calling thread's nowait work has finished
(or raises): a KeyboardInterrupt that interrupts `h.wait()` or `taskwait()` leaves the
work the thread's, so the next taskwait waits for it. The interrupt is injected
deterministically (the future's result raises it once), not timed."""
import concurrent.futures
import threading

import pytest

import offload
from offload.testing import state


def _interrupt_next_result(monkeypatch):
    real = concurrent.futures.Future.result
    fired = []

    def result(self, timeout=None):
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real(self, timeout)
    monkeypatch.setattr(concurrent.futures.Future, "result", result)
    return fired


@pytest.mark.parametrize("interrupted", ["handle_wait", "taskwait"])
def test_a_taskwait_after_an_interrupted_wait_still_waits(runtime, monkeypatch, interrupted):
    runtime()
    release, done = threading.Event(), []

    def work():
        assert release.wait(60)
        done.append(1)
        return 7
    h = offload.host_task(work)
    fired = _interrupt_next_result(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        if interrupted == "handle_wait":
            h.wait()
        else:
            offload.taskwait()
    assert fired and not h.done() and not done
    threading.Timer(0.3, release.set).start()
    offload.taskwait()                      # returned at once before: done was still []
    assert done == [1] and h.done() and h.wait() == 7
    assert state()["pending"] == 0
