"""runtime.operation in C (the accelerator's Operation) against the Python wrapper: the same
outcomes for returns, errors, nesting, methods, metadata, a Ctrl-C that arrives during an
operation, and calls while the runtime shuts down. OFFLOAD_ACCEL is read when offload is
imported, so each side runs in its own process."""
import json
import os
import subprocess
import sys

import pytest

from offload import _accel

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SCRIPT = r'''
import json, threading
import numpy as np
import offload
from offload import runtime
out = {}
out["kind"] = type(offload.target_update).__name__
out["meta"] = [offload.target_update.__name__, offload.target_update.__qualname__,
               offload.target_update.__doc__ == offload.target_update.__wrapped__.__doc__,
               offload.target_update.__module__]
a = np.arange(8, dtype=np.int32)
out["ret"] = repr(offload.target_enter_data(offload.to(a), device=0))
try:
    offload.target_enter_data(offload.to(a[::2]), device=0)
except offload.OffloadError as exc:
    out["error"] = [exc.code.name, type(exc).__name__]
with offload.target_data(offload.tofrom(a), device=0) as d:      # __enter__/__exit__ bind
    out["method"] = type(d).__name__
seen = []
def nested(*maps, **kw):                       # an operation inside an operation
    seen.append(runtime._tls.rt is not None)
    return offload.target_exit_data(*maps, **kw)   # nested: runs straight
op = runtime.operation(nested)
op(offload.from_(a), device=0)
out["nested"] = seen + [getattr(runtime._tls, "rt", None) is None]
out["inflight"] = runtime.current().busy()
def ctrl_c(*maps, **kw):                        # Ctrl-C arrives during the operation
    runtime._Sigint.pending = True
    return 7
try:
    runtime.operation(ctrl_c)()
    out["sigint"] = "returned"
except KeyboardInterrupt:
    out["sigint"] = ["KeyboardInterrupt", runtime._Sigint.pending]
rt = runtime.current()
rt.closing = True                               # a shutdown has begun
try:
    offload.target_enter_data(offload.to(a), device=0)
    out["closing"] = "ran"
except offload.OffloadError as exc:
    out["closing"] = [exc.code.name, exc.message]
rt.closing = False
out["after"] = [rt.busy(), repr(offload.target_exit_data(offload.release(a), device=0))]
print(json.dumps(out))
'''


def _run(accel: str) -> dict:
    env = dict(os.environ, OFFLOAD_ACCEL=accel, OFFLOAD_PLUGINS="host",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_c_wrapper_behaves_as_the_python_one():
    if _accel.load() is None:
        pytest.skip("the accelerator does not build here: only the Python wrapper")
    c, py = _run("1"), _run("0")
    assert c.pop("kind") == "Operation" and py.pop("kind") == "function"
    assert c == py
    assert py["nested"] == [True, True] and py["inflight"] == 0
    assert py["sigint"] == ["KeyboardInterrupt", False]
    assert py["closing"][0] == "UNINITIALIZED" and "shutting down" in py["closing"][1]
    assert py["error"][0] == "INVALID_ARGUMENT" and py["after"] == [0, "None"]
