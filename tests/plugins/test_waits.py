"""The common wait policy (offload/plugins/waits.py): a spin, then sleeps, a pending
Ctrl-C delivered between them. Where the vendor gives a spin in C (the CUDA helper's
offload_query_spin), the spin runs there without the GIL, 100 us a call, instead of one
query (and one GIL round trip) per iteration: 16 threads waiting for kernels on the H200
starved the threads doing work (bench/threads.py). These tests count calls, not time."""
from offload.plugins import waits

NOT_READY = 600


class Device:
    """A stream that finishes after `ready_after` spins (or queries)."""

    def __init__(self, ready_after):
        self.left = ready_after
        self.queries = self.spins = 0

    def query(self, handle):
        self.queries += 1
        self.left -= 1
        return NOT_READY if self.left >= 0 else 0

    def spin(self, handle, seconds):
        assert seconds == waits.SPIN_SECONDS
        self.spins += 1
        self.left -= 1
        return NOT_READY if self.left >= 0 else 0


def test_a_vendor_spin_replaces_the_per_query_loop(monkeypatch):
    """With a spin: one query first, then spins until done; a pending Ctrl-C is delivered
    between spins; the result is the spin's."""
    delivered = []
    monkeypatch.setattr(waits.Interrupts, "hook", lambda: delivered.append(1))
    d = Device(ready_after=5)
    assert waits.poll(d.query, "h", NOT_READY, d.spin) == 0
    assert d.queries == 1 and d.spins == 5
    assert len(delivered) == 4                  # between the spins, not after the last


def test_work_done_at_once_takes_one_query_and_no_spin():
    d = Device(ready_after=0)
    assert waits.poll(d.query, "h", NOT_READY, d.spin) == 0
    assert (d.queries, d.spins) == (1, 0)


def test_an_error_from_the_spin_is_returned_as_is():
    def spin(handle, seconds):
        return 700                              # CUDA_ERROR_ILLEGAL_ADDRESS

    assert waits.poll(lambda h: NOT_READY, "h", NOT_READY, spin) == 700


def test_work_that_outlasts_the_spin_is_waited_for_by_sleeps(monkeypatch):
    """Past the spin's 2 ms, the wait sleeps between queries, as without a vendor spin."""
    clock = [0.0]
    monkeypatch.setattr(waits.time, "perf_counter", lambda: clock[0])
    slept = []
    monkeypatch.setattr(waits.time, "sleep", lambda s: slept.append(s))

    def spin(handle, seconds):
        clock[0] += seconds
        return NOT_READY

    d = Device(ready_after=2)
    assert waits.poll(d.query, "h", NOT_READY, spin) == 0
    assert clock[0] >= waits._SPIN_MAX          # spun 2 ms (in 100 us calls)
    assert slept == [50e-6, waits._SLEEP_MAX]   # then slept between two more queries
    assert d.queries == 3
