""", item 1: queues and events in the common layer. The host plugin's queues
are real (a worker thread each) with OFFLOAD_HOST_ASYNC=1, so ordering is tested here
without a GPU: work on one queue runs in order, an event completes when its queue
reaches it, Queue.wait_event orders another queue without blocking the host, host
functions run in queue order, and errors come back from synchronize."""
import threading
import time

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError


@pytest.fixture
def qrt(runtime):
    return runtime(OFFLOAD_HOST_ASYNC=1, OFFLOAD_HOST_NUM_DEVICES=2)


def test_events_complete_when_their_queue_reaches_them(qrt):
    gate = threading.Event()
    with offload.stream(0) as q:
        q.launch_host_function(gate.wait, 5)
        ev = q.record()
        time.sleep(0.05)
        assert not ev.query() and not q.query()        # the queue is held at the gate
        gate.set()
        ev.wait()
        assert ev.query()
        q.synchronize()
        assert q.query()


def test_wait_event_orders_another_queue_without_blocking_the_host(qrt):
    gate = threading.Event()
    order = []
    q1, q2 = offload.stream(0), offload.stream(0)
    q1.launch_host_function(gate.wait, 5)
    q1.launch_host_function(order.append, "q1")
    ev = q1.record()
    q2.wait_event(ev)                                  # returns at once
    q2.launch_host_function(order.append, "q2")
    time.sleep(0.05)
    assert order == []
    gate.set()
    q2.synchronize()
    assert order == ["q1", "q2"]
    q1.close()
    q2.close()


def test_a_region_on_a_queue_runs_after_work_queued_before_it(qrt, add_one):
    a = np.zeros(64, dtype=np.int32)
    gate = threading.Event()
    with offload.stream(0) as q:
        q.launch_host_function(gate.wait, 5)
        q.launch_host_function(a.fill, 41)             # host work, in queue order
        threading.Timer(0.05, gate.set).start()
        offload.target(add_one.add_one, a, 0, a.size, map=[offload.tofrom(a)], device=0,
                       stream=q)
    assert (a == 42).all()                             # the copy-in saw the fill


def test_queue_errors_come_back_from_synchronize(qrt):
    def boom():
        raise ValueError("queued work failed")
    q = offload.stream(0)
    q.launch_host_function(boom)
    with pytest.raises(ValueError, match="queued work failed"):
        q.synchronize()
    q.synchronize()                                    # reported once
    q.close()
    with pytest.raises(OffloadError, match="closed") as e:
        q.record()
    assert e.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(OffloadError, match="expected an Event"):
        offload.stream(0).wait_event("event")
    with pytest.raises(OffloadError, match="expected a callable"):
        offload.stream(0).launch_host_function(42)


def test_events_across_devices_and_the_initial_device(qrt):
    gate = threading.Event()
    order = []
    q0, q1 = offload.stream(0), offload.stream(1)
    q0.launch_host_function(gate.wait, 5)
    q0.launch_host_function(order.append, 0)
    ev = q0.record()
    threading.Timer(0.05, gate.set).start()
    q1.wait_event(ev)                                  # another device: the host waits
    q1.launch_host_function(order.append, 1)
    q1.synchronize()
    assert order == [0, 1]
    host = offload.stream(offload.omp_get_initial_device())
    assert host.record().query() and host.query()
    host.launch_host_function(order.append, 2)        # the initial device: at once
    assert order == [0, 1, 2]
    q0.close()
    q1.close()


def test_synchronous_plugins_still_order(runtime):
    """Without OFFLOAD_HOST_ASYNC the same calls work (events complete at once)."""
    runtime()
    with offload.stream(0) as q:
        out = []
        q.launch_host_function(out.append, 1)
        ev = q.record()
        assert ev.query() and out == [1]


def test_async_host_queues_run_the_mapping_paths(qrt, add_one):
    """Constructs, nowait work and copies on worker-thread queues."""
    a = np.arange(10_000, dtype=np.int32)
    hs = [offload.target(add_one.add_one, a, 0, a.size, map=[offload.tofrom(a)], device=0,
                         nowait=True)]
    offload.taskwait()
    with offload.target_data(offload.tofrom(a), device=1):
        for _ in range(5):
            offload.target(add_one.add_one, a, 0, a.size, device=1)
    assert (a == np.arange(10_000) + 6).all() and len(hs) == 1


# ---- Stream work with nowait: queued, ordered by events on the device (issue 14, item 2)
def test_stream_pipeline_is_ordered_by_events_not_by_blocking(qrt, add_one):
    """H2D, kernel and D2H on three queues linked by depend=: every call returns while
    the first queue is still held at a gate (nothing waited on the host), and the result
    comes out in order once it opens."""
    a = np.arange(256, dtype=np.int32)
    gate = threading.Event()
    opened_late = []
    q1, q2, q3 = offload.stream(0), offload.stream(0), offload.stream(0)
    with offload.target_data(offload.alloc(a), device=0):
        q1.launch_host_function(lambda: opened_late.append(not gate.wait(10)))
        h1 = offload.target_update(to=[a], device=0, stream=q1, nowait=True)
        h2 = offload.target(add_one.add_one, a, 0, a.size, device=0, stream=q2, nowait=True,
                            depend=[h1])
        h3 = offload.target_update(from_=[a], device=0, stream=q3, nowait=True, depend=[h2])
        assert h1.event is not None and h3.event is not None
        assert not h1.done() and not h2.done() and not h3.done()
        gate.set()
        h3.wait()
        assert (a == np.arange(256) + 1).all()
        assert opened_late == [False]                  # the gate opened: no caller blocked
        h1.wait()
        h2.wait()
    for q in (q1, q2, q3):
        q.close()


def test_stream_work_keeps_its_mapping_until_it_completes(qrt):
    a = np.ones(1024, dtype=np.float64)
    gate = threading.Event()
    with offload.target_data(offload.tofrom(a), device=0), offload.stream(0) as q:
        table = offload.runtime.current().manager.get_device(0).table
        entry = table.lookup(a.ctypes.data, a.nbytes)
        q.launch_host_function(gate.wait, 5)
        h = offload.target_update(from_=[a], device=0, stream=q, nowait=True)
        assert entry.busy == 1                         # held by the queued copy
        gate.set()
        offload.taskwait()                             # the caller's Stream work too
        assert h.done() and entry.busy == 0


def test_stream_update_without_nowait_waits_and_bad_streams_are_refused(qrt):
    a = np.zeros(8)
    with offload.target_data(offload.tofrom(a), device=0), offload.stream(0) as q:
        a[:] = 3
        assert offload.target_update(to=[a], device=0, stream=q) is None
        a[:] = 0
        offload.target_update(from_=[a], device=0, stream=q)
        assert (a == 3).all()
        with pytest.raises(OffloadError, match="open offload.Stream of the construct's device"):
            offload.target_update(to=[a], device=1, stream=q)
        with pytest.raises(OffloadError, match="open offload.Stream"):
            offload.target_update(to=[a], device=0, stream="stream")
    with pytest.raises(OffloadError, match="open offload.Stream"):
        offload.target_update(to=[a], device=0, stream=q)              # closed
