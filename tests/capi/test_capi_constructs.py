"""The C ABI's data constructs, step by step against LLVM 19: hypothesis writes scripts of
enter/exit data, updates, target regions (each also `nowait`, then a taskwait), nested
target data regions and host writes
(tests/capi/construct_steps.c.in runs them), and after every step the host values, what is
mapped and each mapped element's device value must be what LLVM 19's runtime shows, under
offload's runtime with the compiled mapping core and with its pure-Python twin
(OFFLOAD_ACCEL=0). The rules are LLVM's offload/test/mapping ones (reference counts, when
`to` and `from` copy, `always`, `release`, `delete`, updates of absent data)."""
import os
import subprocess

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.capi_support import CLANG, HERE, LLVM_LIB, TARGET, WHY, ours, run  # noqa: F401

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")

N = 16                                                  # construct_steps.c.in's arrays


@pytest.fixture(scope="module")
def steps_program(tmp_path_factory):
    exe = tmp_path_factory.mktemp("steps") / "construct_steps"
    subprocess.run([CLANG, *TARGET, "-O1", "-x", "c",
                    os.path.join(HERE, "capi", "construct_steps.c.in"), "-o", str(exe)],
                   check=True, capture_output=True)
    return str(exe)


sections = st.integers(0, N - 1).flatmap(
    lambda lo: st.tuples(st.just(lo), st.integers(1, N - lo)))
arrays = st.integers(0, 1)


def _one(op: str, modes: int):
    return st.tuples(st.just(op), arrays, sections, st.integers(0, modes - 1)).map(
        lambda t: f"{t[0]} {t[1]} {t[2][0]} {t[2][1]} {t[3]}")


plain_steps = st.one_of(
    _one("E", 3), _one("X", 5), _one("U", 3), _one("T", 5),
    st.tuples(arrays, st.integers(0, N - 1), st.integers(-99, 999)).map(
        lambda t: f"H {t[0]} {t[1]} {t[2]} 0"))
steps = st.recursive(
    plain_steps,
    lambda inner: st.tuples(arrays, sections, st.lists(inner, max_size=5)).map(
        lambda t: "; ".join([f"D {t[0]} {t[1][0]} {t[1][1]} 0", *t[2], "}"])),
    max_leaves=16)
scripts = st.lists(steps, min_size=1, max_size=10).map("; ".join)


def _runs(exe: str, lib: str, script: str) -> dict[str, tuple[int, str, str]]:
    return {"LLVM 19": run(exe, LLVM_LIB, script),
            "offload, compiled core": run(exe, f"{lib}:{LLVM_LIB}", script, OFFLOAD_ACCEL="1"),
            "offload, OFFLOAD_ACCEL=0": run(exe, f"{lib}:{LLVM_LIB}", script, OFFLOAD_ACCEL="0")}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=scripts)
@example(script="E 0 0 4 0; T 0 0 4 0; H 0 1 50 0; D 0 0 8 0; T 0 0 4 3; }; X 0 0 4 0; "
                "D 0 2 4 0; E 0 2 2 0; X 0 2 2 2; }; X 0 0 4 3")
@example(script="D 1 0 16 0; E 1 4 4 1; H 1 5 7 0; U 1 4 4 0; X 1 4 4 3; T 1 0 16 2; "
                "X 1 0 16 1; }; T 1 3 2 2")
def test_constructs_step_by_step_as_llvm(steps_program, ours, script):
    got = _runs(steps_program, ours, script)
    want = got.pop("LLVM 19")
    assert want[0] == 0 and want[1].endswith("\n"), want
    steps_seen = want[1].count("\n")
    for who, (rc, out, err) in got.items():
        if (rc, out) != want[:2]:
            theirs, mine = want[1].splitlines(), out.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b),
                         min(len(theirs), len(mine)))
            pytest.fail(f"{who} differs from LLVM 19 at step {first + 1} of {steps_seen} "
                        f"(exit {rc}):\n  LLVM:  {theirs[first] if first < len(theirs) else '-'}"
                        f"\n  {who}: {mine[first] if first < len(mine) else '-'}\n"
                        f"script: {script}\n{err}")


def test_a_wrong_step_is_seen(steps_program, ours):
    """The comparison can fail: a script whose `from` copy a runtime skipped (simulated by
    changing the host copy behind its back in one run only) is told apart."""
    a = run(steps_program, LLVM_LIB, "E 0 0 4 0; T 0 0 4 0; X 0 0 4 0")
    b = run(steps_program, f"{ours}:{LLVM_LIB}", "E 0 0 4 0; T 0 0 4 0; X 0 0 4 1")
    assert a[0] == b[0] == 0 and a[1] != b[1]
    assert a[1].splitlines()[:2] == b[1].splitlines()[:2]
