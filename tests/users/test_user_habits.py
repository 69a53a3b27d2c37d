"""Item 5: what users expect of the objects they hold: a repr that says what it
is and its state, dir() of a compiled module listing its kernels, and `target(...,
nowait=True)` typed as returning a Handle (a user's mypy is clean)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import offload

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# a child Python finds this offload first, and the rest where this process does
ENV = dict(os.environ,
           PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))


def test_reprs_say_what_and_which_state(rt, add_one):
    a = np.zeros(16, np.int32)
    h = offload.target(add_one.add_one, a, 0, 16, map=[offload.tofrom(a)], device=0,
                       nowait=True)
    h.wait()
    assert repr(h) == "<offload.Handle done>"
    bad = offload.target_enter_data(offload.to(a, present=True), device=0, nowait=True)
    try:
        bad.wait()
    except offload.OffloadError:
        pass
    assert repr(bad).startswith("<offload.Handle failed: OffloadError: ")
    with offload.stream(0) as q:
        e = q.record()
        assert repr(e) == "<offload.Event on host device 0 (plugin-local number)>"
        assert repr(q).startswith("<offload.Queue 0x") and "device 0" in repr(q)
    with offload.locked(a, device=0) as p:
        assert repr(p).endswith("on device 0, locked>")
    assert repr(p).endswith(", unlocked>")
    assert repr(add_one).startswith("<Image ")
    assert repr(add_one).endswith(": add_one, inc64, nothing, scale>")


def test_dir_of_an_image_lists_its_kernels(add_one):
    assert {"add_one", "scale", "inc64", "nothing", "kernels", "combine"} <= set(dir(add_one))


def test_target_nowait_is_typed_as_a_handle(tmp_path):
    pytest.importorskip("mypy", reason="mypy (the test extra) is not installed here")
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""
        import numpy as np
        import offload

        k = offload.compile_c("void f(int *a) { a[0] = 1; }")
        a = np.zeros(1, np.int32)
        h: offload.Handle = offload.target(k.f, a, nowait=True)
        h.wait()
        r: None = offload.target(k.f, a)
        flag = bool(a[0])
        either = offload.target(k.f, a, nowait=flag)
        if either is not None:
            either.wait()
    """))
    wrong = tmp_path / "wrong.py"            # the check can fail: without nowait, None
    wrong.write_text("import numpy as np\nimport offload\n"
                     "k = offload.compile_c('void f(int *a) { a[0] = 1; }')\n"
                     "h: offload.Handle = offload.target(k.f, np.zeros(1, np.int32))\n")
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                          "--follow-imports=silent", str(user), str(wrong)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=ENV)
    errors = [ln for ln in res.stdout.splitlines() if ": error:" in ln]
    assert len(errors) == 1 and errors[0].startswith(str(wrong) + ":4:"), res.stdout
    assert 'has type "None", variable has type "Handle"' in errors[0], errors
