"""What the drop-in's tests share: clang-19, LLVM 19's runtime, offload's library
(`ours`), the programs of tests/capi built once (`built`) and running one (`run`)."""
import ctypes
import glob
import os
import shutil
import subprocess

import pytest

from offload.capi import libdir


HERE = os.path.dirname(os.path.abspath(__file__))          # tests/
CLANG = shutil.which("clang-19")
LLVM_LIB = "/usr/lib/llvm-19/lib"
HAVE_LLVM = os.path.exists(os.path.join(LLVM_LIB, "libomptarget.so.19.1")) and \
    os.path.exists(os.path.join(LLVM_LIB, "libomp.so.5"))
WHY = ("clang-19 not installed" if not CLANG else
       "LLVM 19's libomptarget (libomp-19-dev) not installed" if not HAVE_LLVM else "")
PROGRAMS = sorted(p for p in glob.glob(os.path.join(HERE, "capi", "*.c*"))
                  if p.endswith((".c", ".cpp")) and not p.endswith("shared_lib.c"))
CLANGXX = shutil.which("clang++-19")
TARGET = ["-fopenmp", "-fopenmp-targets=x86_64-unknown-linux-gnu"]


@pytest.fixture(scope="module")
def ours():
    return libdir()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if WHY:                  # also for tests of other modules that use these programs
        pytest.skip(WHY)
    out = tmp_path_factory.mktemp("capi")
    exes = {}
    for src in PROGRAMS:
        exe = out / os.path.splitext(os.path.basename(src))[0]
        cc = CLANGXX if src.endswith(".cpp") else CLANG
        subprocess.run([cc, *TARGET, "-O1", src, "-o", str(exe)], check=True,
                       capture_output=True)
        exes[os.path.basename(src)] = str(exe)
    return exes


def run(exe, lib_path, *args, cwd=None, **env):
    # the suite's accelerator mode (OFFLOAD_ACCEL, see conftest.py) reaches the programs too
    e = {k: v for k, v in os.environ.items()
         if k == "OFFLOAD_ACCEL" or not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
    e.update(env, LD_LIBRARY_PATH=lib_path)
    res = subprocess.run([exe, *args], capture_output=True, text=True, env=e, timeout=120,
                         cwd=cwd or os.path.dirname(exe))
    return res.returncode, res.stdout, res.stderr


def run_on_ours(tmp_path, ours, name, *args, **env):
    """Build tests/capi/`name` (a program LLVM 19 gets wrong, so it runs on offload's
    runtime alone) and run it there with `args` (and `env` added): (exit status, stdout,
    stderr)."""
    cxx = name.endswith(".cpp.in")
    exe = tmp_path / name.split(".")[0]
    subprocess.run([CLANGXX if cxx else CLANG, *TARGET, "-O1", "-x", "c++" if cxx else "c",
                    os.path.join(HERE, "capi", name), "-o", str(exe)], check=True,
                   capture_output=True)
    return run(str(exe), f"{ours}:{LLVM_LIB}", *args, **env)


_P = ctypes.POINTER(ctypes.c_void_p)
_I = ctypes.POINTER(ctypes.c_int64)


def construct(lib, kind, a, t, dev=0, begin=None, size=None):
    """The data construct through the library's own export (its C body, then the
    runtime), in this process: the library shares this program's runtime."""
    p = a.ctypes.data if begin is None else begin
    fn = getattr(lib, f"__tgt_target_data_{kind}_mapper")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, _P, _P, _I, _I,
                   ctypes.c_void_p, ctypes.c_void_p]
    bases, begins = (ctypes.c_void_p * 1)(a.ctypes.data), (ctypes.c_void_p * 1)(p)
    sizes = (ctypes.c_int64 * 1)(a.nbytes - (p - a.ctypes.data) if size is None else size)
    types = (ctypes.c_int64 * 1)(t)
    fn(None, dev, 1, bases, begins, sizes, types, None, None)


def count(monkeypatch, calls, module, name, key=None):
    """Count the calls of module.name in calls[key or name] (for this test)."""
    real = getattr(module, name)

    def counted(*args, **kw):
        calls[key or name] = calls.get(key or name, 0) + 1
        return real(*args, **kw)
    monkeypatch.setattr(module, name, counted)
