"""Subscripts known to be >= 0 are cast to uint64 for numba (issue 32: numba's wraparound
of negative indices was a third of a GPU stencil's integer work); every other index keeps
Python's meaning: a kernel whose index may be negative still reads from the end."""
import ast

import numpy as np
import pytest

import offload
from offload.pykernels import indices, rewrite
from tests import pykernels_defs as K

# numba and numba-cuda come with offload[test] (offload[jit]): no skip without them


def _casts(tree: ast.AST) -> list[str]:
    """Each cast index as written, in order."""
    return [ast.unparse(n.args[0]) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == indices.CAST]


def _both(k):
    """The casts of the host function and of the GPU device function."""
    host = _casts(rewrite.host_module(k.source, "h"))
    gpu = _casts(rewrite.cuda_function(k.source, "g", {})[0])
    return sorted(host), sorted(gpu)


def test_a_stencils_indices_are_all_cast_on_both_targets():
    host, gpu = _both(K.stencil)
    want = sorted(["i", "j", "i - 1", "j", "i + 1", "j", "i", "j - 1", "i", "j + 1"])
    assert host == want and gpu == want


@pytest.mark.parametrize("kernel, want", [
    (K.shift_back, ["i"]),                       # b[i] only: a[i - 1] may be a[-1]
    (K.shift_two, ["i", "j", "j - 2", "i - 1", "j - 2"]),  # not i - 2 (i from 1)
    (K.reassigned, []),                          # a loop index the body assigns
])
def test_an_index_that_may_be_negative_is_not_cast(kernel, want):
    host, gpu = _both(kernel)
    assert host == sorted(want) and gpu == sorted(want)


def _kernel_of(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text("import offload\nfrom offload import prange\n\n" + text)
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


@pytest.mark.parametrize("loop", [
    "prange(n, a.shape[0])",          # a start that is not a literal
    "prange(a.shape[0] - 1, -1, -1)", # a negative step
    "prange(0, a.shape[0], n)",       # a step that is not a literal
])
def test_ranges_not_known_to_count_up_from_zero_leave_indices_alone(tmp_path, loop):
    k = _kernel_of(tmp_path, "k", f"@offload.kernel\ndef k(a, n):\n    for i in {loop}:\n"
                                  f"        a[i] = 1.0\n")
    assert _both(k) == ([], [])


def test_a_parameter_the_body_assigns_and_a_shadowed_range_are_left_alone(tmp_path):
    k = _kernel_of(tmp_path, "k", "@offload.kernel\ndef k(a, b):\n    b = a\n"
                                  "    for i in prange(a.shape[0]):\n        b[i] = a[i]\n")
    assert _both(k) == (["i"], ["i"])             # a[i] only
    k = _kernel_of(tmp_path, "k2", "range = lambda *a: a\n\n@offload.kernel\n"
                                   "def k2(a):\n    for i in prange(a.shape[0]):\n"
                                   "        for j in range(3):\n            a[j] = 1.0\n")
    assert _both(k) == ([], [])


def test_negative_indices_still_wrap_on_the_host(runtime):
    runtime()
    a = np.arange(10.0)
    b = np.zeros(10)
    offload.target(K.shift_back, a, b, device=0)
    np.testing.assert_array_equal(b, np.roll(a, 1))
    a2 = np.random.default_rng(0).random((6, 7))
    b2 = np.zeros_like(a2)
    offload.target(K.shift_two, a2, b2, device=0)
    ref = np.zeros_like(a2)
    for i in range(1, 6):
        for j in range(2, 7):
            ref[i, j] = a2[i - 2, j - 2] + a2[i - 1, j - 2]
    np.testing.assert_array_equal(b2, ref)
    c = np.arange(8.0)
    d = np.zeros(8)
    offload.target(K.reassigned, c, d, device=0)
    np.testing.assert_array_equal(d[2:], c[np.arange(2, 8) - 3])
