"""The one thread harness of the tests: start workers together, join them with a bound,
and fail with every worker's exception."""
from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def run_threads(work: Callable[..., Any], args: Iterable[Sequence[Any]] = (),
                timeout: float = 300.0) -> None:
    """Run work(*a) for each a in `args` on its own thread, all released at once; raise
    AssertionError naming every exception a worker raised, or a worker still running
    after `timeout` seconds."""
    arglist = [tuple(a) for a in args]
    start = threading.Barrier(len(arglist))
    errors: list[str] = []
    lock = threading.Lock()

    def body(*a: Any) -> None:
        try:
            start.wait()
            work(*a)
        except BaseException:                # noqa: BLE001 - reported below
            with lock:
                errors.append(traceback.format_exc())

    threads = [threading.Thread(target=body, args=a, daemon=True) for a in arglist]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    stuck = sum(t.is_alive() for t in threads)
    assert not stuck, f"{stuck} worker thread(s) still running after {timeout} s"
    assert not errors, f"{len(errors)} worker(s) failed:\n" + "\n".join(errors)


def background(work: Callable[..., Any], *args: Any, **kwargs: Any) -> threading.Thread:
    """Start work(*args, **kwargs) on a daemon thread and return it (for tests that watch
    a thread while it runs: join it with a timeout, check is_alive())."""
    t = threading.Thread(target=work, args=args, kwargs=kwargs, daemon=True)
    t.start()
    return t
