"""Issue 28: in a forked child, which starts with an empty runtime, a Pinned handle and a
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
