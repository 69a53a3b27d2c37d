"""The accelerator's Lock (offload/accel_c), which tables and devices use when it loads:
threading.Lock's behaviour, checked side by side with threading.Lock."""
import threading
import time

import pytest

from offload import _accel


@pytest.fixture(params=["accel", "threading"])
def make(request):
    if request.param == "threading":
        return threading.Lock
    module = _accel.load()
    if module is None:
        pytest.skip("the accelerator does not build here")
    return module.Lock


def test_acquire_release_locked_and_misuse(make):
    lock = make()
    assert not lock.locked()
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(False) is False                 # not reentrant
    assert lock.acquire(timeout=0.05) is False
    assert lock.acquire(blocking=False) is False
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-2)
    with lock:
        assert lock.locked()
    assert not lock.locked()


def test_a_blocked_acquire_waits_for_the_holder_and_lets_others_run(make):
    lock = make()
    lock.acquire()
    got = threading.Event()
    t = threading.Thread(target=lambda: (lock.acquire(), got.set(), lock.release()))
    t.start()
    assert not got.wait(0.2)                            # waits (and the GIL is free:
    lock.release()                                      # this thread ran meanwhile)
    t.join(60)
    assert got.is_set() and not lock.locked()


def test_a_condition_over_it_waits_and_is_notified(make):
    lock = make()
    cond = threading.Condition(lock)
    state = []

    def waiter():
        with cond:
            assert cond.wait_for(lambda: state, timeout=60)
            state.append("woke")
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    with cond:
        state.append("set")
        cond.notify_all()
    t.join(60)
    assert state == ["set", "woke"]


def test_counts_stay_right_under_contention(make):
    lock = make()
    total = [0]

    def work():
        for _ in range(20000):
            with lock:
                total[0] += 1
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert total[0] == 80000
