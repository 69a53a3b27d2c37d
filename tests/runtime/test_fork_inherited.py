"""In a forked child, which starts with an empty runtime, a Pinned handle and a
target_data entry inherited from the parent are inert: leaving `with offload.locked(a):`
and `with offload.target_data(...):` in the child is a quiet no-op (it raised NOT_FOUND),
and the child offloads on its own runtime; the parent's are unchanged."""
import os

import numpy as np

import offload
from offload.testing import state


def test_with_blocks_entered_before_a_fork_leave_quietly_in_the_child(runtime, add_one):
    runtime()
    a = np.zeros(8192, dtype=np.uint8)
    b = np.zeros(16, dtype=np.int32)
    r, w = os.pipe()
    pid = -1
    try:
        with offload.locked(a, device=0):
            with offload.target_data(offload.tofrom(b), device=0):
                pid = os.fork()
        if pid == 0:
            s = state()
            ok = (all(d["mappings"] == 0 for d in s["devices"].values())
                  and all(p["entries"] == 0 for p in s["pins"].values()))
            offload.target(add_one.add_one, b, 0, 16, map=[offload.tofrom(b)], device=0)
            os.write(w, b"1" if ok and (b == 1).all() else b"0")
            os._exit(0)
    except BaseException:
        if pid == 0:
            os.write(w, b"E")
            os._exit(1)
        raise
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1", got
    assert (b == 0).all()                                   # the parent's copy back: zeros
    assert state()["devices"][0]["mappings"] == 0


def test_a_handle_inherited_by_a_forked_child_names_the_fork(runtime):
    """A nowait Handle still running at fork(): its work runs in the parent, whose
    workers the child lacks, so h.wait() in the child hung for ever; it raises, naming
    the fork, and the child's taskwait (its own empty runtime) returns."""
    import threading
    runtime()
    release = threading.Event()
    h = offload.host_task(lambda: release.wait(30) and 42)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = b"?"
        try:
            try:
                h.wait()
                out = b"W"
            except offload.OffloadError as e:
                out = b"1" if "before fork()" in str(e) else b"M"
            offload.taskwait()
        except BaseException:
            out = b"E"
        os.write(w, out)
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    release.set()
    assert got == b"1", got
    assert h.wait() == 42                                   # the parent's work is intact
