"""PTX of Python kernels made without a GPU (issue 32): numba-cuda's device function and
offload's entries in one module that ptxas accepts for sm_90; a kernel of several phases
has one entry per phase, code between loops launched as one thread."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from offload import OffloadError
from tests import pykernels_defs as K

# numba and numba-cuda come with offload[test] (offload[jit]): no skip without them


def _ptxas() -> str:
    """ptxas from the CUDA toolkit, else from NVIDIA's nvcc wheel (offload[test])."""
    found = shutil.which("ptxas") or (os.path.exists("/usr/local/cuda/bin/ptxas") and
                                      "/usr/local/cuda/bin/ptxas")
    if found:
        return found
    import nvidia
    for root in nvidia.__path__:
        for sub in ("cu13/bin/ptxas", "cuda_nvcc/bin/ptxas"):
            if os.path.exists(os.path.join(root, sub)):
                return os.path.join(root, sub)
    raise AssertionError("no ptxas: pip install nvidia-cuda-nvcc (part of offload[test])")


def _ptx(k, *args):
    from offload.pykernels import cuda, host
    types = k.types_of(args)
    _, body = host.compile_host(k.source, types)
    return cuda.compile_cuda(k.source, types, host.reduction_types(body, k.source), (9, 0))


CASES = {
    "saxpy": (K.saxpy, (np.zeros(4, np.float32), np.zeros(4, np.float32), 2.0, 4), []),
    "stencil": (K.stencil, (np.zeros((4, 4)), np.zeros((4, 4))), []),
    "dot": (K.dot, (np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(1)),
            [False, True]),
    "reverse_twice": (K.reverse_twice, (np.zeros(4, np.int64), np.zeros(4, np.int64), 4),
                      [False, False]),
    "grid_marks": (K.grid_marks, (np.zeros((4, 4), np.int64), 1, 2), []),
    "odd_only": (K.odd_only, (np.zeros(4, np.int32),), []),
    "row_sums": (K.row_sums, (np.zeros((4, 4)), np.zeros(4)), []),
    "histogram": (K.histogram, (np.zeros(4), np.zeros(4, np.int64), 0.0, 1.0), []),
    "largest": (K.largest, (np.zeros(4, np.float32), np.zeros(1, np.float32)),
                [False, True]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ptx_from_python_is_accepted_by_ptxas(name, tmp_path, runtime):
    runtime()
    k, args, phases = CASES[name]
    binary = _ptx(k, *args)
    assert binary.format == "ptx"
    if phases:
        assert [fixed is not None for _, fixed in binary.phases[k.__name__]] == phases
        entries = [e for e, _ in binary.phases[k.__name__]]
    else:
        assert not binary.phases
        entries = [k.__name__]
    text = binary.data.decode()
    for e in entries:
        assert e in binary.prototypes
        body = text[text.index(f".visible .entry {e}("):]
        body = body[:body.index("\tret;")]
        declared = re.findall(rf"\.param \.\w+ ({e}_param_\d+)", body)
        loaded = re.findall(rf"ld\.param\.\w+ %\w+, \[({e}_param_\d+)\]", body)
        assert declared and loaded == declared          # every parameter passed on
        assert body.count("st.param") == len(declared) + 1      # and the phase number
    path = tmp_path / f"{name}.ptx"
    path.write_bytes(binary.data)
    out = subprocess.run([_ptxas(), "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_second_compile_comes_from_the_cache(runtime, monkeypatch):
    runtime()
    from offload.pykernels import cuda
    args = (np.zeros(4, np.int8),)
    first = _ptx(K.add_one, *args)
    monkeypatch.setattr(cuda, "_compile", lambda *a: pytest.fail("compiled again"))
    assert _ptx(K.add_one, *args).data == first.data


def test_a_local_set_in_a_loop_and_read_after_it_is_refused_for_gpus(runtime, tmp_path):
    """On a GPU every thread has its own locals: a non-reduced value carried out of a
    prange loop is refused with its line (the host runs it, as numba does)."""
    runtime()
    path = tmp_path / "carry.py"
    path.write_text("import offload\n"
                    "def k(a, out):\n"
                    "    for i in offload.prange(a.size):\n"
                    "        last = a[i]\n"
                    "    out[0] = last\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import carry
    finally:
        sys.path.remove(str(tmp_path))
    import offload
    k = offload.kernel(carry.k)
    with pytest.raises(OffloadError, match=r"carry.py:3: 'last' is set by the prange loop"):
        _ptx(k, np.zeros(4), np.zeros(1))
