"""The CUDA plugin's cffi declarations against the real cuda.h (no GPU needed)."""
import glob
import os
import re
import subprocess

import pytest

from offload import targets
from offload.plugins import _cuda_driver as cuda

HEADERS = sorted(glob.glob("/usr/local/cuda*/include/cuda.h")) + \
    [p for p in ("/usr/include/cuda.h",) if os.path.exists(p)]


@pytest.fixture(scope="module")
def header_values(tmp_path_factory):
    if not HEADERS:
        pytest.skip("no cuda.h on this machine (CUDA toolkit not installed)")
    header = HEADERS[0]
    names = [n for n in dir(cuda) if re.match(r"(CUDA_|CU_)[A-Z0-9_]+$", n)]
    attrs = {f"CU_DEVICE_ATTRIBUTE_{k.upper().replace(' ', '_').replace('-', '_')}": v
             for k, v in cuda.ATTRIBUTES.items()}
    renames = {"CU_DEVICE_ATTRIBUTE_MULTIPROCESSORS": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
               "CU_DEVICE_ATTRIBUTE_ASYNC_ENGINES": "CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT"}
    attrs = {renames.get(k, k): v for k, v in attrs.items()}
    src = tmp_path_factory.mktemp("cudah") / "check.c"
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <cuda.h>", "int main(void) {"]
    for n in names:
        lines.append(f'  printf("{n} %lld\\n", (long long){n});')
    for n in attrs:
        lines.append(f'  printf("{n} %lld\\n", (long long){n});')
    for t in ("CUdeviceptr", "CUdevice", "CUresult", "CUcontext", "CUstream", "size_t"):
        lines.append(f'  printf("sizeof {t} %zu\\n", sizeof({t}));')
    lines.append('  printf("CUDA_VERSION %d\\n", CUDA_VERSION);')
    lines.append("  return 0; }")
    src.write_text("\n".join(lines))
    exe = src.with_suffix("")
    subprocess.run(["cc", f"-I{os.path.dirname(header)}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    vals = dict(line.rsplit(" ", 1) for line in out.splitlines())
    return {k: int(v) for k, v in vals.items()}, names, attrs


def test_enum_values_match_cuda_h(header_values):
    vals, names, attrs = header_values
    print(f"checked against CUDA_VERSION {vals['CUDA_VERSION']}")
    for n in names:
        assert vals[n] == getattr(cuda, n), n
    for n, v in attrs.items():
        assert vals[n] == v, n


def test_type_sizes_match_cffi(header_values):
    vals, _, _ = header_values
    ffi = cuda.ffi
    for t in ("CUdeviceptr", "CUdevice", "CUresult", "CUcontext", "CUstream", "size_t"):
        assert vals[f"sizeof {t}"] == ffi.sizeof(t), t


def test_every_bound_entry_point_is_declared_by_cuda_h(tmp_path):
    """Each versioned name we bind (cuMemAlloc_v2, ...) is what cuda.h's macros declare,
    with the same number of parameters."""
    if not HEADERS:
        pytest.skip("no cuda.h on this machine (CUDA toolkit not installed)")
    protos = re.findall(r"CUresult (cu\w+)\(([^)]*)\)", cuda.CDEF)
    body = ["#include <cuda.h>", "int main(void) {"]
    for name, params in protos:
        n = len([p for p in params.split(",") if p.strip() and p.strip() != "void"])
        # a call with our arity type-checks against the header's prototype
        args = ", ".join("0" for _ in range(n))
        body.append(f"  if (0) (void){name}({args});")
    body.append("  return 0; }")
    src = tmp_path / "names.c"
    src.write_text("\n".join(body))
    res = subprocess.run(["cc", "-Werror=implicit-function-declaration",
                          f"-I{os.path.dirname(HEADERS[0])}", "-c", str(src), "-o",
                          str(tmp_path / "names.o")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_cubin_sm_reads_both_layouts():
    assert targets.cubin_sm(0x6005A04, 8) == 90          # CUDA 13 (ELF ABI version 8)
    assert targets.cubin_sm(0x5A055A, 7) == 90           # CUDA <= 12
    assert targets.cubin_sm(0x500550, 7) == 80


def test_struct_layouts_match_cuda_h(tmp_path):
    """CUDA_MEMCPY2D as we declare it has cuda.h's size and field offsets."""
    if not HEADERS:
        pytest.skip("no cuda.h on this machine (CUDA toolkit not installed)")
    fields = [f for f, _ in cuda.ffi.typeof("CUDA_MEMCPY2D").fields]
    body = ["#include <stdio.h>", "#include <stddef.h>", "#include <cuda.h>", "int main(void) {",
            '  printf("size %zu\\n", sizeof(CUDA_MEMCPY2D));']
    body += [f'  printf("{f} %zu\\n", offsetof(CUDA_MEMCPY2D, {f}));' for f in fields]
    body.append("  return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(body))
    subprocess.run(["cc", f"-I{os.path.dirname(HEADERS[0])}", str(src), "-o",
                    str(tmp_path / "layout")], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True,
                         text=True).stdout
    vals = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert vals["size"] == cuda.ffi.sizeof("CUDA_MEMCPY2D")
    for f in fields:
        assert vals[f] == cuda.ffi.offsetof("CUDA_MEMCPY2D", f), f
