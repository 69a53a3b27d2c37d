"""Host tasks and queue host functions that call back into offload. Nested
regions and waits work; what would wait for itself (shutdown() from one of offload's own
threads, a host function synchronizing its own queue: both hung for ever) is refused
with INVALID_VALUE, and the runtime stays usable."""
import threading

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.testing import state


def _within(seconds, fn):
    """fn() on a thread; fails (rather than hang the suite) if it does not return."""
    out, err = [], []

    def run():
        try:
            out.append(fn())
        except BaseException as exc:        # noqa: B036 - handed to the caller
            err.append(exc)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "hung"
    if err:
        raise err[0]
    return out[0] if out else None


def test_a_host_task_runs_nested_regions_and_waits(rt, add_one):
    a = np.zeros(16, np.int32)

    def nested():
        offload.target(add_one.add_one, a, 0, 16, device=0, map=[offload.tofrom(a)])
        h = offload.target(add_one.add_one, a, 0, 16, device=0, map=[offload.tofrom(a)],
                           nowait=True)
        h.wait()
        offload.taskwait()
        return int(a[0])
    assert _within(60, lambda: offload.host_task(nested).wait()) == 2
    assert state()["devices"][0]["mappings"] == 0


def test_shutdown_from_a_host_task_is_refused(rt, add_one):
    h = offload.host_task(offload.shutdown)
    with pytest.raises(OffloadError, match="would wait for itself") as e:
        _within(60, h.wait)
    assert e.value.code is ErrorCode.INVALID_VALUE
    a = np.zeros(4, np.int32)
    offload.target(add_one.add_one, a, 0, 4, device=0, map=[offload.tofrom(a)])
    assert a[0] == 1


@pytest.mark.parametrize("call", ["shutdown", "synchronize"])
def test_a_queue_host_function_that_would_wait_for_itself_is_refused(runtime, call):
    runtime(OFFLOAD_HOST_ASYNC="1")                 # host queues on worker threads
    q = offload.stream(0)
    seen = []

    def fn():
        try:
            offload.shutdown() if call == "shutdown" else q.synchronize()
            seen.append("returned")
        except OffloadError as exc:
            seen.append(exc.code)
    q.launch_host_function(fn)
    _within(60, q.synchronize)
    assert seen == [ErrorCode.INVALID_VALUE]
    q.close()
    assert offload.omp_get_num_devices() == 1       # the runtime is still there
