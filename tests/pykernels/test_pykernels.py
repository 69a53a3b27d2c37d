"""@offload.kernel on the host (issue 32): Python kernels compiled by numba run through
offload.target with every clause a C kernel takes, give numpy's results, compile once per
argument types, and refuse what they cannot run with the source line and the fix."""
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.testing import state
from tests import pykernels_defs as K

# numba and numba-cuda come with offload[test] (offload[jit]): no skip without them


def test_saxpy_matches_numpy_through_map_clauses(runtime):
    runtime()
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, dtype=np.float32)
    offload.target(K.saxpy, y, x, 2.5, x.size, map=[offload.to(x), offload.tofrom(y)],
                   device=0)
    np.testing.assert_allclose(y, 1 + 2.5 * x)


def test_a_2d_stencil_keeps_shape_and_matches_numpy(runtime):
    runtime()
    u = np.random.default_rng(0).random((37, 53))
    v = np.zeros_like(u)
    offload.target(K.stencil, u, v, map=[offload.to(u), offload.tofrom(v)], device=0)
    ref = np.zeros_like(u)
    ref[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    np.testing.assert_allclose(v, ref)


@pytest.mark.parametrize("device", ["initial", 0])
def test_reductions_sum_max_and_dot(runtime, device):
    """A prange with `s += ...` or `m = max(m, ...)` into a scalar reduces it, on the
    initial device (the host binary on the host's arrays) and on a host device."""
    runtime()
    dev = offload.omp_get_initial_device() if device == "initial" else device
    a = np.random.default_rng(1).random(10_001)
    b = np.random.default_rng(2).random(10_001)
    out = np.zeros(1)
    offload.target(K.total, a, out, device=dev)
    assert out[0] == pytest.approx(a.sum(), rel=1e-12)
    offload.target(K.largest, a, out, device=dev)
    assert out[0] == a.max()
    offload.target(K.dot, a, b, out, device=dev)
    assert out[0] == pytest.approx(np.dot(a, b), rel=1e-12)


def test_a_prange_around_a_range_loop(runtime):
    runtime()
    a = np.zeros((37, 101), dtype=np.int64)
    offload.target(K.grid_marks, a, 1, 3, device=0)
    ref = np.zeros_like(a)
    K.grid_marks_ref(ref, 1, 3)
    np.testing.assert_array_equal(a, ref)


def test_a_scalar_the_body_sets_itself_is_not_reduced(runtime):
    runtime()
    u = np.random.default_rng(5).random((40, 30))
    out = np.zeros(40)
    offload.target(K.row_sums, u, out, device=0)
    np.testing.assert_allclose(out, u.sum(axis=1))
    assert not next(iter(K.row_sums.source.loops.values())).reductions


def test_continue_in_a_prange_body(runtime):
    runtime()
    a = np.zeros(101, dtype=np.int32)
    offload.target(K.odd_only, a, device=0)
    np.testing.assert_array_equal(a, np.arange(101) % 2)


def test_two_prange_loops_each_finish_before_the_next(runtime):
    runtime()
    n = 5000
    a = np.zeros(n, dtype=np.int64)
    b = np.zeros(n, dtype=np.int64)
    offload.target(K.reverse_twice, a, b, n, device=0)       # implicitly mapped tofrom
    np.testing.assert_array_equal(a, 3 * np.arange(n))
    np.testing.assert_array_equal(b, 3 * (n - 1 - np.arange(n)) + 1)


def test_atomics_on_integers_and_floats(runtime):
    runtime()
    data = np.random.default_rng(3).random(20_000)
    bins = np.zeros(10, dtype=np.int64)
    offload.target(K.histogram, data, bins, 0.0, 0.1, map=[offload.to(data),
                                                         offload.tofrom(bins)], device=0)
    np.testing.assert_array_equal(bins, np.histogram(data, 10, (0.0, 1.0))[0])
    for dt in (np.int32, np.float64):
        a = (np.random.default_rng(4).random(3000) * 1000 - 500).astype(dt)
        hi, lo = np.full(1, -10**6, dt), np.full(1, 10**6, dt)
        offload.target(K.extremes, a, hi, lo, device=0)
        assert (hi[0], lo[0]) == (a.max(), a.min())


def test_prange_takes_ranges_arguments(runtime):
    runtime()
    for start, stop, step in [(3, 100, 7), (99, -1, -3), (5, 5, 1), (10, 0, 1)]:
        a = np.zeros(100, dtype=np.int32)
        offload.target(K.strided, a, start, stop, step, device=0)
        ref = np.zeros(100, dtype=np.int32)
        ref[list(range(start, stop, step))] += 1
        np.testing.assert_array_equal(a, ref)


def test_nowait_chains_with_depend(runtime):
    runtime(OFFLOAD_HOST_ASYNC=1)
    a = np.zeros(4096, dtype=np.int64)
    with offload.target_data(offload.tofrom(a), device=0):
        h = offload.target(K.add_one, a, device=0, nowait=True)
        for _ in range(4):
            h = offload.target(K.add_one, a, device=0, nowait=True, depend=[h])
        h.wait()
    np.testing.assert_array_equal(a, 5)


def test_compiled_once_per_argument_types(runtime):
    runtime()
    k = offload.kernel(K.add_one.py_func)
    for _ in range(3):
        offload.target(k, np.zeros(8, np.float32), device=0)
    assert k.compiles == {"host": 1, "cuda": 0}
    offload.target(k, np.zeros(8, np.int16), device=0)
    offload.target(k, np.zeros(8, np.float64), device=0)
    assert k.compiles["host"] == 3


def test_a_kernel_is_also_its_python_function():
    a = np.zeros(5, np.int64)
    K.add_one(a)
    np.testing.assert_array_equal(a, 1)


def test_wrong_argument_types_are_named_with_the_fix(runtime):
    runtime()
    with pytest.raises(OffloadError, match=r"argument 0 is int64\[:\], but the signature says "
                       r"float32\[:\]; pass a.astype\(np.float32\)") as ei:
        offload.target(K.typed_fill, np.zeros(4, np.int64), 4, device=0)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    a = np.zeros(4, np.float32)
    offload.target(K.typed_fill, a, 4, device=0)
    np.testing.assert_array_equal(a, 7)
    with pytest.raises(OffloadError, match="argument 0 is a 1-d array that is not "
                       "C-contiguous.*np.ascontiguousarray"):
        offload.target(K.add_one, np.zeros(8)[::2], device=0)
    with pytest.raises(OffloadError, match="argument 0 is a str"):
        offload.target(K.add_one, "abc", device=0)
    with pytest.raises(OffloadError, match=r"takes 4 argument\(s\) \(y, x, a, n\), got 2"):
        offload.target(K.saxpy, a, a, device=0)
    with pytest.raises(OffloadError, match="dtype complex128 is not one a kernel takes"):
        offload.target(K.add_one, np.zeros(3, complex), device=0)


BAD = {
    "try": ("def k(a):\n    for i in prange(3):\n        try:\n            a[i] = 1\n"
            "        except Exception:\n            pass\n", 3, "uses try"),
    "return": ("def k(a):\n    for i in prange(3):\n        a[i] = 1\n    return a\n", 4,
               "returns a value"),
    "nested prange": ("def k(a):\n    for i in prange(3):\n        for j in prange(3):\n"
                      "            a[i] = j\n", 3, "a prange loop inside another"),
    "break": ("def k(a):\n    for i in prange(3):\n        if i:\n            break\n", 4,
              "cannot break"),
    "prange elsewhere": ("def k(a):\n    r = prange(3)\n", 2, "other than as the range"),
    "dunder": ("def k(a):\n    for i in prange(3):\n        __x = i\n", 3, "two underscores"),
    "defaults": ("def k(a, n=3):\n    pass\n", 1, "plain positional parameters"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_unsupported_constructs_are_reported_with_their_line(tmp_path, name):
    text, line, what = BAD[name]
    path = tmp_path / f"bad_{name.replace(' ', '_')}.py"
    path.write_text("from offload import prange\n" + text)
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)         # a file's function
    with pytest.raises(OffloadError, match=f"{path}:{line + 1}: .*{what}"):
        offload.kernel(ns["k"])


def test_a_body_numba_cannot_compile_is_reported(runtime):
    runtime()

    def k(a):
        for i in offload.prange(a.size):
            a[i] = {"no": "dicts of strings in kernels"}[i]
    with pytest.raises(OffloadError,
                       match=r"(?s)cannot be compiled for the host \(numba\).*test_pykernels"):
        offload.target(offload.kernel(k), np.zeros(3), device=0)


def test_the_core_package_does_not_import_numba():
    code = ("import sys, offload\n"
            "from tests import pykernels_defs\n"                # decorating reads source only
            "assert 'numba' not in sys.modules, 'numba imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_numba_the_error_says_what_to_install(runtime, monkeypatch):
    runtime()
    monkeypatch.setitem(sys.modules, "numba", None)
    k = offload.kernel(K.add_one.py_func)
    with pytest.raises(OffloadError, match=r"pip install 'offload\[jit\]'") as ei:
        offload.target(k, np.zeros(3), device=0)
    assert ei.value.code is ErrorCode.UNSUPPORTED


def test_amdgpu_refuses_python_kernels_clearly(runtime, sim):
    """numba has no AMDGPU target: a Python kernel on an AMDGPU device (the HSA double)
    is refused, naming what to do instead."""
    runtime(OFFLOAD_PLUGINS="amdgpu", OFFLOAD_AMDGPU_HSA_LIBRARY=sim.path)
    with pytest.raises(OffloadError, match="numba has no AMDGPU target") as ei:
        offload.target(K.add_one, np.zeros(3), device=0)
    assert ei.value.code is ErrorCode.UNSUPPORTED


@pytest.mark.parametrize("example", ["stencil.py", "reduction.py"])
def test_the_python_kernel_examples_pass(example, tmp_path):
    """examples/python_kernels: written once, run on whatever device exists (the host
    plugin here, the GPU on a GPU machine)."""
    import os
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    env = dict(os.environ, OFFLOAD_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "python_kernels",
                                                       example), "300"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("PASS"), out.stdout + out.stderr


def test_a_reduction_on_mapped_arrays_takes_the_quick_path(runtime, monkeypatch):
    """A synchronous region's reduction scratch is device memory passed by address, so a
    reducing kernel on mapped arrays maps nothing (no general region path); nowait maps
    the scratch for its region instead."""
    import importlib
    target_mod = importlib.import_module("offload.target")     # the module, not target()
    runtime()
    a = np.arange(1000.0)
    b = np.full(1000, 2.0)
    out = np.zeros(1)
    with offload.target_data(offload.to(a), offload.to(b), offload.tofrom(out), device=0):
        offload.target(K.dot, a, b, out, device=0)             # compiled, warmed up
        monkeypatch.setattr(target_mod, "_target", None)       # the general path: gone
        offload.target(K.dot, a, b, out, device=0)
        monkeypatch.undo()
        offload.target_update(from_=[out], device=0)
        assert out[0] == 2 * a.sum()
        out[0] = 0
        offload.target(K.dot, a, b, out, device=0, nowait=True).wait()
        offload.target_update(from_=[out], device=0)
        assert out[0] == 2 * a.sum()
        inside = state()["devices"][0]
        assert inside["mappings"] == 3, inside            # a, b, out: the scratch is gone
    assert state()["devices"][0] == {"mappings": 0, "allocations": 0}
