"""Host tasks that wait on other nowait work never deadlock the pool (8
workers): a worker that waits lends its place, so work queued behind the waiters runs.
Twelve waiters, each waiting on work spawned after all of them."""
import threading

import offload
from offload.testing import state


def test_more_waiting_host_tasks_than_workers_finish(runtime):
    runtime()
    n = 12
    inner: list = []
    ready = threading.Event()

    def waiter(i):
        assert ready.wait(30)
        return inner[i].wait() + 100

    outer = [offload.host_task(waiter, i) for i in range(n)]
    inner.extend(offload.host_task(lambda i=i: i) for i in range(n))
    ready.set()
    done = threading.Thread(target=offload.taskwait)
    done.start()
    done.join(60)
    assert not done.is_alive(), "the pool deadlocked: every worker waits on queued work"
    assert [h.wait() for h in outer] == [100 + i for i in range(n)]
    assert state()["pending"] == 0


def test_a_dependence_chain_longer_than_the_pool_runs(runtime):
    """Each host task depends on the next one spawned (a dependence waited for on a
    worker): all 20 finish."""
    runtime()
    gate = threading.Event()
    first = offload.host_task(gate.wait, 30)
    hs = [first]
    for i in range(20):
        hs.append(offload.host_task(lambda i=i: i, depend=[hs[-1]]))
    gate.set()
    assert hs[-1].wait() == 19
    offload.taskwait()
