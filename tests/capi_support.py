"""What the drop-in's tests share: clang-19, LLVM 19's runtime, offload's library
(`ours`), the programs of tests/capi built once (`built`) and running one (`run`)."""
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
