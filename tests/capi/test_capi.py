"""Offload as a drop-in libomptarget.so.19.1. Programs compiled once with clang-19
run under LLVM 19's own libomptarget (Debian libomp-19-dev) and under offload's; stdout and
exit status must be identical. A C library with offloading loaded into this Python process
shares offload's runtime with the Python API. Skipped, with the reason, without clang-19
or LLVM 19's libomptarget."""
import ctypes
import os
import re
import subprocess

import numpy as np
import pytest

import offload
from offload.capi import abi
from tests.capi_support import (  # noqa: F401 - fixtures
    CLANG, CLANGXX, HERE, LLVM_LIB, PROGRAMS, TARGET, WHY, built, ours, run,
)

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")


@pytest.mark.parametrize("program", [os.path.basename(p) for p in PROGRAMS])
def test_same_output_as_llvm(built, ours, program):
    rc_llvm, out_llvm, err_llvm = run(built[program], LLVM_LIB)
    rc_ours, out_ours, err_ours = run(built[program], f"{ours}:{LLVM_LIB}")
    assert out_llvm, f"LLVM printed nothing: {err_llvm}"
    assert (rc_ours, out_ours) == (rc_llvm, out_llvm), err_ours


@pytest.mark.parametrize("accel", ["0", "1"])
@pytest.mark.parametrize("nbytes", [4096, 1 << 20])
def test_map_back_race_loses_no_update(built, ours, accel, nbytes):
    """LLVM's map_back_race.cpp scenario (tests/capi/map_back_race.c): 100 trials in a row
    of 4 threads x 200 regions mapping one array tofrom, at 4 KiB and 1 MiB, with and
    without the accelerator; LLVM 19 loses no increment, and neither may offload."""
    exe = built["map_back_race.c"]
    rc_llvm, out_llvm, err_llvm = run(exe, LLVM_LIB, str(nbytes), "100")
    rc, out, err = run(exe, f"{ours}:{LLVM_LIB}", str(nbytes), "100", OFFLOAD_ACCEL=accel)
    assert (rc_llvm, rc) == (0, 0), out_llvm + err_llvm + out + err
    assert out == out_llvm == f"{nbytes} bytes: 0 of 100 trials lost increments, present 0\n"


def test_library_and_its_exports(ours):
    """One line from --libdir; the SONAME, and LLVM 19's 71 functions at VERS1.0 (plus the
    two libomp looks for), nothing else."""
    import sys
    res = subprocess.run([sys.executable, "-m", "offload.capi", "--libdir"], capture_output=True,
                         text=True, check=True)
    assert res.stdout.strip() == ours and res.stdout.count("\n") == 1
    lib = os.path.join(ours, abi.SONAME)
    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    assert f"Library soname: [{abi.SONAME}]" in dyn
    syms = subprocess.run(["nm", "-D", "--defined-only", "--with-symbol-versions", lib],
                          capture_output=True, text=True, check=True).stdout.split()
    names = {s.split("@")[0] for s in syms if "@@VERS1.0" in s}
    assert names == set(abi.EXPORTS)
    llvm = subprocess.run(["nm", "-D", "--defined-only", "--with-symbol-versions",
                           os.path.join(LLVM_LIB, "libomptarget.so.19.1")], capture_output=True,
                          text=True, check=True).stdout.split()
    assert {s.split("@")[0] for s in llvm if "@@VERS1.0" in s} == set(abi.LLVM_EXPORTS)


def test_no_files_left_behind(built, ours, tmp_path):
    """LLVM's host plugin leaves one temporary file per run; offload's none, in TMPDIR or
    in /tmp. Other processes may write /tmp meanwhile (a compiler beside the suite): a
    file offload left would be new after every run, so one run that leaves /tmp as it
    found it, of five, clears it."""
    new: set = set()
    for _ in range(5):
        before = set(os.listdir("/tmp"))
        rc, out, err = run(built["prelock.c"], f"{ours}:{LLVM_LIB}", TMPDIR=str(tmp_path))
        assert rc == 0 and "PASS" in out
        assert os.listdir(tmp_path) == []
        new = set(os.listdir("/tmp")) - before
        if not new:
            break
    assert not new, new


@pytest.fixture(scope="module")
def shared_lib(tmp_path_factory, ours):
    out = tmp_path_factory.mktemp("capi_shared") / "libshared.so"
    subprocess.run([CLANG, *TARGET, "-O1", "-shared", "-fPIC",
                    os.path.join(HERE, "capi", "shared_lib.c"), "-o", str(out)], check=True,
                   capture_output=True)
    ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(os.path.join(ours, abi.SONAME), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(out))
    lib.lock.restype = ctypes.c_void_p
    lib.lock.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return lib


def test_one_runtime_for_c_and_python(runtime, shared_lib):
    """A mapping made from Python is present for C code in the same process, and the
    reverse; a region in C sees the device copy Python made."""
    runtime(OFFLOAD_HOST_NUM_DEVICES=2)
    a = np.arange(64, dtype=np.int32)
    ptr = a.ctypes.data_as(ctypes.c_void_p)
    assert shared_lib.is_present(ptr, 0) == 0
    offload.target_enter_data(offload.to(a), device=0)
    assert shared_lib.is_present(ptr, 0) == 1                  # Python's mapping, seen by C
    assert shared_lib.add_one_present(ptr, 64, 0) == 0          # runs on the device copy
    assert a[5] == 5                                            # not copied back by C
    offload.target_exit_data(offload.from_(a), device=0)
    assert a[5] == 6 and shared_lib.is_present(ptr, 0) == 0
    b = np.arange(32, dtype=np.int32)
    bp = b.ctypes.data_as(ctypes.c_void_p)
    shared_lib.map_to(bp, 32, 1)                                # C maps ...
    assert offload.omp_target_is_present(b, 1) == 1             # ... Python sees it
    dev = offload.omp_get_mapped_ptr(b, 1)
    np.copyto(np.frombuffer((ctypes.c_int32 * 32).from_address(dev), dtype=np.int32), b * 3)
    shared_lib.unmap_from(bp, 32, 1)
    assert (b == np.arange(32) * 3).all()


def test_a_pin_from_c_is_the_pin_python_sees(runtime, shared_lib):
    runtime(OFFLOAD_HOST_NUM_DEVICES=1)
    a = np.zeros(1 << 16, dtype=np.uint8)
    assert shared_lib.lock(a.ctypes.data, a.nbytes, 0)
    pins = offload.testing.state()["pins"]["host"]
    assert pins["entries"] == 1 and pins["bytes"] == a.nbytes     # the C lock, in our map
    assert offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)        # Python's: the same pin
    assert offload.testing.state()["pins"]["host"]["entries"] == 1
    offload.llvm_omp_target_unlock_mem(a, 0)
    offload.llvm_omp_target_unlock_mem(a, 0)
    assert offload.testing.state()["pins"]["host"]["entries"] == 0


@pytest.mark.parametrize("policy", ["disabled", "mandatory"])
@pytest.mark.parametrize("program", ["host_fallback.c", "device_api.c", "data_refcount.c",
                                     "prelock.c"])
def test_same_output_under_omp_target_offload(built, ours, program, policy):
    """OMP_TARGET_OFFLOAD as LLVM 19 applies it: disabled keeps the devices for the
    device API but runs every construct on the host; mandatory changes nothing here."""
    rc_llvm, out_llvm, err_llvm = run(built[program], LLVM_LIB, OMP_TARGET_OFFLOAD=policy)
    rc_ours, out_ours, err_ours = run(built[program], f"{ours}:{LLVM_LIB}",
                                      OMP_TARGET_OFFLOAD=policy)
    assert out_llvm, f"LLVM printed nothing: {err_llvm}"
    assert (rc_ours, out_ours) == (rc_llvm, out_llvm), err_ours


def test_compile_openmp_shares_the_python_runtime(runtime):
    """compile_openmp: C with target regions, its functions taking numpy arrays; its
    regions see what Python mapped (no copy until Python updates)."""
    runtime(OFFLOAD_HOST_NUM_DEVICES=1)
    m = offload.compile_openmp(r'''
    #include <omp.h>
    void scale(double *a, int n, double f) {
    #pragma omp target map(tofrom: a[0:n])
      for (int i = 0; i < n; i++) a[i] *= f;
    }
    int present(double *a) { return omp_target_is_present(a, 0); }
    ''')
    a = np.arange(8, dtype=np.float64)
    m.scale(a, 8, 2.0)
    assert a.tolist() == [2.0 * i for i in range(8)]
    with offload.target_data(offload.to(a), device=0):
        assert m.present(a) == 1
        m.scale(a, 8, 10.0)                     # on the device copy Python made
        assert a[1] == 2.0
        offload.target_update(from_=[a], device=0)
        assert a[1] == 20.0
    with pytest.raises(offload.OffloadError, match="expected an array of float64"):
        m.scale(a.astype(np.float32), 8, 2.0)
    with pytest.raises(AttributeError, match="defines: present, scale"):
        m.nope()



@pytest.fixture(scope="module")
def built_g(tmp_path_factory):
    out = tmp_path_factory.mktemp("capi_g")
    exes = {}
    for name in ("data_refcount", "struct_members", "device_ptrs", "update_motion",
                 "declare_link"):
        exe = out / name
        subprocess.run([CLANG, *TARGET, "-g", "-O1", os.path.join(HERE, "capi", name + ".c"),
                        "-o", str(exe)], check=True, capture_output=True)
        exes[name] = str(exe)
    return exes


@pytest.mark.parametrize("name", ["data_refcount", "struct_members", "device_ptrs",
                                  "update_motion", "declare_link"])
def test_info_argument_listing_as_llvm(built_g, ours, name):
    """LIBOMPTARGET_INFO=1 (KERNEL_ARGS): each construct's header (region, file:line:col,
    argument count) and one line per argument (map type, variable name, size, implicit),
    word for word as LLVM 19 prints them (programs built with -g; addresses aside)."""
    import re

    def lines(err):
        return [re.sub(r"0x[0-9a-f]+", "ADDR", ln) for ln in err.splitlines()
                if ln.startswith("omptarget device")]
    _, _, err_llvm = run(built_g[name], LLVM_LIB, LIBOMPTARGET_INFO="1")
    _, _, err_ours = run(built_g[name], f"{ours}:{LLVM_LIB}", LIBOMPTARGET_INFO="1")
    assert lines(err_llvm), err_llvm
    assert lines(err_ours) == lines(err_llvm)


@pytest.mark.parametrize("bits", ["2", "4", "8", "16", "32"])
@pytest.mark.parametrize("name", ["data_refcount", "struct_members", "device_ptrs",
                                  "update_motion", "declare_link"])
def test_info_lines_as_llvm(built_g, ours, name, bits):
    """The other LIBOMPTARGET_INFO bits, word for word as LLVM 19 (addresses aside):
    MAPPING_EXISTS ('Mapping exists ...' with LLVM's '(incremented)', '(update
    suppressed)', '(decremented[, delayed deletion])' and '(reset, delayed deletion)',
    struct members leaving the counts alone, attached pointers looked up before their
    pointee and written once per shadow pointer), DUMP_TABLE (every device, after each
    construct at its file:line:col, declarations where -g put them, 'table empty', the
    tables at exit), MAPPING_CHANGED, PLUGIN_KERNEL (blocks, threads and mode, as the
    plugin reports them) and DATA_TRANSFER."""
    import re

    def lines(err):
        return [re.sub(r"0x[0-9a-f]+", "ADDR", ln) for ln in err.splitlines()
                if ln.startswith(("omptarget device", '"PluginInterface" device'))]
    _, _, err_llvm = run(built_g[name], LLVM_LIB, LIBOMPTARGET_INFO=bits)
    _, _, err_ours = run(built_g[name], f"{ours}:{LLVM_LIB}", LIBOMPTARGET_INFO=bits)
    assert lines(err_llvm), err_llvm
    assert lines(err_ours) == lines(err_llvm)


def test_ld_preload_over_llvms_library(built, ours, tmp_path):
    """LD_PRELOAD=<ours>/libomptarget.so.19.1 with LLVM's library still on the path: the
    program runs on offload's (its profile is written) and libomp still counts the devices
    (through __tgt_get_num_devices, which LLVM 19 does not export)."""
    prof = tmp_path / "prof.out"
    rc_llvm, out_llvm, _ = run(built["device_api.c"], LLVM_LIB)
    rc, out, err = run(built["device_api.c"], LLVM_LIB,
                       LD_PRELOAD=os.path.join(ours, abi.SONAME), OFFLOAD_CAPI_PROFILE=str(prof))
    assert (rc, out) == (rc_llvm, out_llvm), err
    assert out.startswith("num devices 4") and prof.exists()


def test_loading_after_capsule_lookups(tmp_path):
    """Loaded into a Python process that has looked attributes up on capsules (DLPack
    does): cffi's embedding start-up, which uses the capsule type's version tag as a lock,
    must not abort the process."""
    import sys
    script = tmp_path / "late_load.py"
    script.write_text(
        "import numpy as np, offload\n"
        "cap = np.arange(3).__dlpack__()\n"
        "assert not hasattr(cap, 'anything')\n"
        "m = offload.compile_openmp('void inc(int *a, int n) {\\n'\n"
        "    '#pragma omp target map(tofrom: a[0:n])\\n'\n"
        "    'for (int i = 0; i < n; i++) a[i] += 1;\\n}\\n')\n"
        "a = np.zeros(4, dtype=np.int32)\n"
        "m.inc(a, 4)\n"
        "print(a.tolist())\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[1, 1, 1, 1]"


def _masked(err):
    return [re.sub(r"0x[0-9a-f]+", "0x…", ln) for ln in err.splitlines()]


@pytest.mark.parametrize("case", range(10))
def test_failing_constructs_print_what_llvm_prints(built, ours, case):
    """tests/capi/failure_messages.c: each failing construct's stderr, line for line as
    LLVM 19's (addresses masked): LLVM's messages (`omptarget message:` for `present` and
    explicit extension, both when a present clause also extends), its error chain, where
    to read more, the missing source location, the fatal error; and the exit status."""
    exe = built["failure_messages.c"]
    llvm = run(exe, LLVM_LIB, str(case))
    mine = run(exe, f"{ours}:{LLVM_LIB}", str(case))
    assert llvm[0] != 0 and "omptarget" in llvm[2]
    assert (mine[0], mine[1]) == (llvm[0], llvm[1])
    assert _masked(mine[2]) == _masked(llvm[2])
