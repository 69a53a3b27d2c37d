"""A C program on offload's libomptarget is never silently wrong. Every export
either does its job or fails the way LLVM 19 fails: whatever its Python body raises
becomes one `omptarget error:` line and LLVM's failure value, or for a construct LLVM's
fatal error; a runtime that cannot start is reported once and fails every construct; a
bad value LLVM accepts is accepted; the program's own signal dispositions are left alone.
The C programs (tests/capi) run under both runtimes."""
import ctypes
import os

import pytest

from offload.capi import abi, build, devices, exports
from tests.capi_support import LLVM_LIB, WHY, built, ours, run  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")

# LLVM 19's value for a failed call of each export that returns an int (the rest: NULL
# pointers; void exports only print)
FAIL = -1
ZERO = ("__tgt_mapper_num_components", "omp_get_num_devices", "omp_get_device_num",
        "omp_get_initial_device", "omp_target_is_present", "omp_get_interop_int",
        "__tgt_print_device_info", "__tgt_get_num_devices", "tgt_pause_resource")


def _restype(ret):
    return (None if ret == "void" else ctypes.c_void_p if ret.endswith("*")
            else ctypes.c_int64 if ret in ("int64_t", "intptr_t") else ctypes.c_int)


def test_every_export_fails_when_its_body_raises(runtime, ours, monkeypatch, capfd):  # noqa: F811
    """An exception injected into each export in turn (not an OffloadError: any
    exception) reaches the program as a failure: the failure value (never cffi's silent
    0 for an int export whose success is 0), or for a construct LLVM's fatal error."""
    runtime(OFFLOAD_HOST_NUM_DEVICES=2)
    ctypes.CDLL(os.path.join(LLVM_LIB, "libomp.so.5"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(ours, abi.SONAME), mode=ctypes.RTLD_GLOBAL)
    assert lib.omp_get_num_devices() == 2            # bound, sharing this runtime
    fatal = []
    monkeypatch.setattr(devices, "fatal", fatal.append)   # construct_failed ends in it
    checked = []
    try:
        for name, decl in abi.EXPORTS.items():
            if name in build._IN_C:
                continue
            ret, _, _, names = build._split(decl)
            fn = getattr(lib, name)
            fn.restype = _restype(ret)
            fn.argtypes = [ctypes.c_uint64] * len(names)
            exports.inject_failure(name)
            capfd.readouterr()
            got = fn(*[0] * len(names))
            err = capfd.readouterr().err
            assert f"omptarget error: RuntimeError: failure injected into {name}" in err, name
            if name in exports.CONSTRUCTS:
                assert fatal == ["failure of target construct while offloading is mandatory"], \
                    name
                fatal.clear()
            elif ret.endswith("*"):
                assert got is None, (name, got)
            elif ret != "void":
                assert got == (0 if name in ZERO else FAIL), (name, got)
            assert not fatal, name
            checked.append(name)
    finally:
        exports.inject_failure()
    assert len(checked) == len(abi.EXPORTS) - len(build._IN_C)
    assert lib.omp_get_num_devices() == 2            # the runtime still works


@pytest.mark.parametrize("name", ["__tgt_target_kernel", "__tgt_target_data_begin_mapper",
                                  "omp_target_memcpy", "omp_target_alloc"])
def test_an_injected_failure_in_a_c_program_is_seen(built, ours, name):  # noqa: F811
    """The same through a whole C program (OFFLOAD_CAPI_INJECT): a construct aborts with
    LLVM's fatal error; a device-API call returns its failure value, which the program
    prints (sigint_handler.c prints the copies' return codes)."""
    exe = built["sigint_handler.c"]
    _, clean, _ = run(exe, f"{ours}:{LLVM_LIB}")
    rc, out, err = run(exe, f"{ours}:{LLVM_LIB}", OFFLOAD_CAPI_INJECT=name)
    assert f"failure injected into {name}" in err
    if name in exports.CONSTRUCTS:
        assert rc != 0 and "omptarget fatal error 1: failure of target construct" in err
    else:
        assert rc == 0 and out != clean, out


@pytest.mark.parametrize("how", ["handler", "ignore"])
def test_the_programs_sigint_disposition_is_left_alone(built, ours, how):  # noqa: F811
    """sigint_handler.c: its handler (or SIG_IGN) is still installed after the runtime
    started, runs on raise(SIGINT), and every construct and copy after it does its work,
    as under LLVM 19."""
    exe = built["sigint_handler.c"]
    args = () if how == "handler" else ("ignore",)
    llvm = run(exe, LLVM_LIB, *args)
    mine = run(exe, f"{ours}:{LLVM_LIB}", *args)
    assert llvm[0] == 0 and "disposition kept: 1" in llvm[1]
    assert mine[:2] == llvm[:2], mine[2]


# variable=value -> whether LLVM 19 runs the program (else it aborts)
LLVM_ACCEPTS = {"OMP_TARGET_OFFLOAD=bogus": True, "OMP_DEFAULT_DEVICE=abc": True,
                "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=bogus": True,
                "LIBOMPTARGET_RR_DEVMEM_SIZE=abc": True, "LIBOMPTARGET_INFO=abc": False}


@pytest.mark.parametrize("setting", sorted(LLVM_ACCEPTS))
def test_a_bad_value_llvm_accepts_runs_and_one_it_aborts_on_fails(built, ours, setting):  # noqa: F811
    """env_values.c: a value LLVM 19 accepts (libomp warns about OMP_* itself) runs the
    region as LLVM does; LIBOMPTARGET_INFO=abc, which aborts LLVM, fails the construct
    (never a region skipped with exit status 0)."""
    var, value = setting.split("=")
    exe = built["env_values.c"]
    llvm = run(exe, LLVM_LIB, **{var: value})
    mine = run(exe, f"{ours}:{LLVM_LIB}", **{var: value})
    if LLVM_ACCEPTS[setting]:
        assert llvm[:2] == (0, "11 12 13 14\n")
        assert mine[:2] == llvm[:2], mine[2]
    else:
        assert llvm[0] != 0 and mine[0] != 0 and "11 12" not in mine[1]
        assert f"{var}={value!r}" in mine[2] and "fatal error" in mine[2]


@pytest.mark.parametrize("setting", ["OFFLOAD_HOST_NUM_DEVICES=abc", "OFFLOAD_ACCEL=7",
                                     "OFFLOAD_HOST_ASYNC=maybe"])
def test_a_bad_offload_variable_is_reported_once_and_fails_the_construct(built, ours,  # noqa: F811
                                                                         setting):
    var, value = setting.split("=")
    rc, out, err = run(built["env_values.c"], f"{ours}:{LLVM_LIB}", **{var: value})
    assert rc != 0 and out == "", out
    assert err.count("could not start") == 1 and var in err
    assert "omptarget fatal error 1: failure of target construct" in err


def test_mandatory_offload_with_no_device_fails_the_construct(built, ours):  # noqa: F811
    """OMP_TARGET_OFFLOAD=mandatory and no plugin with a device (OFFLOAD_PLUGINS=cuda on a
    machine without one): LLVM 19's checkDeviceAndCtors fails the construct with "No
    images found compatible with the installed hardware"; it never runs on the host.
    Without mandatory the region falls back to the host, as LLVM's does."""
    exe = built["env_values.c"]
    rc, out, err = run(exe, f"{ours}:{LLVM_LIB}", OMP_TARGET_OFFLOAD="mandatory",
                       OFFLOAD_PLUGINS="cuda", OFFLOAD_CUDA_LIBRARY="libcuda-absent.so")
    assert rc != 0 and out == "", out
    assert "No images found compatible with the installed hardware" in err
    assert "omptarget fatal error 1: failure of target construct" in err
    rc, out, err = run(exe, f"{ours}:{LLVM_LIB}", OFFLOAD_PLUGINS="cuda",
                       OFFLOAD_CUDA_LIBRARY="libcuda-absent.so")
    assert (rc, out) == (0, "11 12 13 14\n"), err


def test_the_library_never_imports_from_the_directory_it_was_built_in(built, tmp_path):  # noqa: F811
    """`python -m offload.capi --libdir` run in a directory holding a json.py: the library
    records only the standard library's, offload's and its dependencies' directories, so
    a C program on it never imports that file; the library is the same one whatever the
    directory it was asked for in."""
    import subprocess
    import sys
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "imported"
    (planted / "json.py").write_text(      # harmless to the builder (python -m imports it)
        "import sys\n"
        f"if getattr(sys, '_offload_capi_owns_python', False): open({str(marker)!r}, 'w')\n"
        "from _json import *  # noqa\n")
    other = tmp_path / "other"
    other.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OFFLOAD_CACHE_DIR"] = str(tmp_path / "cache")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    env["PYTHONPATH"] = root                       # offload from this tree, as the suite
    libs = [subprocess.run([sys.executable, "-m", "offload.capi", "--libdir"], cwd=str(where),
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
            for where in (planted, other)]
    assert libs[0] == libs[1], libs
    rc, out, err = run(built["env_values.c"], f"{libs[0]}:{LLVM_LIB}", cwd=str(planted),
                       PYTHONPATH=str(planted))
    assert (rc, out) == (0, "11 12 13 14\n"), err
    assert not marker.exists(), "the planted json.py was imported"
    with open(os.path.join(libs[0], abi.SONAME), "rb") as f:
        assert str(planted).encode() not in f.read()


def test_an_ompt_tool_may_ask_the_runtime_from_its_callbacks(tmp_path, ours):  # noqa: F811
    """ompt_present_callback_beyond_llvm.c.in: a data-op callback calls
    omp_target_is_present on the data being mapped, copied and unmapped. LLVM 19
    deadlocks there; offload makes no callback that waits on itself, and the program
    finishes with the region's result."""
    from tests.capi_support import run_on_ours
    rc, out, err = run_on_ours(tmp_path, ours, "ompt_present_callback_beyond_llvm.c.in")
    assert (rc, out) == (0, "a[255]=256, callbacks that asked: some\n"), err


def test_recording_never_follows_a_planted_symlink(built, ours, tmp_path):  # noqa: F811
    """LIBOMPTARGET_RECORD=1 in a directory where each file a launch records is a symlink
    to a file of someone else's: the recording replaces the links, the files they point
    at are untouched."""
    import shutil as sh
    first, planted = tmp_path / "first", tmp_path / "planted"
    first.mkdir()
    planted.mkdir()
    env = dict(LIBOMPTARGET_RECORD="1", LIBOMPTARGET_RR_SAVE_OUTPUT="1",
               LIBOMPTARGET_RR_DEVMEM_SIZE="1")
    for where in (first, planted):
        sh.copy(built["env_values.c"], where / "prog")
    rc, _, err = run(str(first / "prog"), f"{ours}:{LLVM_LIB}", **env)
    assert rc == 0, err
    names = sorted(p for p in os.listdir(first) if p != "prog")
    assert any(n.endswith(".json") for n in names), names
    victims = []
    for n in names:
        victim = tmp_path / f"victim-{n}"
        victim.write_text("not yours")
        os.symlink(victim, planted / n)
        victims.append(victim)
    rc, out, err = run(str(planted / "prog"), f"{ours}:{LLVM_LIB}", **env)
    assert (rc, out) == (0, "11 12 13 14\n"), err
    assert all(v.read_text() == "not yours" for v in victims)
    for n in names:
        assert not os.path.islink(planted / n) and os.path.isfile(planted / n), n
    assert sorted(p for p in os.listdir(planted) if p != "prog") == names   # no temporaries


def test_a_child_forked_while_threads_offload_can_offload(tmp_path, ours):  # noqa: F811
    """fork_threads_beyond_llvm.c.in: 20 forks, each while three threads run target
    regions (the first while they start the runtime); every child runs a region of its
    own and the parent one after. The library
    takes the interpreter's lock around fork() (pthread_atfork) and the child starts with
    an empty runtime; LLVM 19 hangs in some children."""
    from tests.capi_support import run_on_ours
    rc, out, err = run_on_ours(tmp_path, ours, "fork_threads_beyond_llvm.c.in",
                               PYTHONFAULTHANDLER="1")   # a hung child's stacks, if any
    assert (rc, out) == (0, "children that could not offload: 0 of 20; parent after: 2\n"), err


def test_a_child_forked_while_the_runtime_starts_can_offload(tmp_path, ours):  # noqa: F811
    """fork_during_start_beyond_llvm.c.in: three threads start the runtime (their first
    construct loads the plugins' modules) and the main thread forks 0-40 ms later, one
    process per delay, so that some fork lands while another thread imports a module
    (an import lock held at the fork stayed held in the child: its first construct
    hung). The fork waits until no other thread is importing; every child offloads."""
    from tests.capi_support import run_on_ours
    rc, out, err = run_on_ours(tmp_path, ours, "fork_during_start_beyond_llvm.c.in", "0",
                               PYTHONFAULTHANDLER="1")   # a hung child's stacks, if any
    assert (rc, out) == (0, "child: offloaded; threads: 1 1 1\n"), err
    exe = str(tmp_path / "fork_during_start_beyond_llvm")
    failed = []
    for delay_us in range(1000, 41000, 2000):
        rc, out, err = run(exe, f"{ours}:{LLVM_LIB}", str(delay_us), PYTHONFAULTHANDLER="1")
        if (rc, out) != (0, "child: offloaded; threads: 1 1 1\n"):
            failed.append((delay_us, rc, out, err))
    assert not failed, failed


def test_pythonfaulthandler_reaches_the_library_interpreter(tmp_path, ours):  # noqa: F811
    """The library's interpreter is isolated (it reads no PYTHON* variable), but
    PYTHONFAULTHANDLER, a debugging aid, is honoured: a program that aborts after a
    construct prints the library threads' Python stacks when it is set, and not else."""
    import subprocess

    from tests.capi_support import CLANG, TARGET
    src = tmp_path / "aborts.c"
    src.write_text("#include <stdlib.h>\nint main(void) {\n  int a = 1;\n"
                   "#pragma omp target map(tofrom : a)\n  a += 1;\n  abort();\n}\n")
    subprocess.run([CLANG, *TARGET, "-O1", str(src), "-o", str(tmp_path / "aborts")],
                   check=True, capture_output=True)
    for value, printed in (("1", True), ("", False)):
        rc, _, err = run(str(tmp_path / "aborts"), f"{ours}:{LLVM_LIB}",
                         PYTHONFAULTHANDLER=value)
        assert rc == -6, err
        assert ("Fatal Python error: Aborted" in err) is printed, (value, err)


def test_a_lock_past_the_memlock_limit_on_the_host_returns_the_pointer(built, ours):  # noqa: F811
    """lock_beyond_rlimit.c under RLIMIT_MEMLOCK = 8 MiB (and, for root, without
    CAP_IPC_LOCK, which ignores the limit): LLVM 19's host plugin returns the pointer of a
    16 MiB buffer; offload returns it too, unpinned, with one warning, and the region and
    the unlock work on it."""
    import shutil as sh
    wrap = ["prlimit", "--memlock=8388608"]
    if os.geteuid() == 0:
        wrap = ["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", *wrap]
    if any(sh.which(w) is None for w in ("prlimit", wrap[0])):
        pytest.skip(f"{wrap[0]} or prlimit (util-linux) not installed")
    exe = built["lock_beyond_rlimit.c"]
    where = os.path.dirname(exe)
    llvm = run(sh.which(wrap[0]), LLVM_LIB, *wrap[1:], exe, cwd=where)
    mine = run(sh.which(wrap[0]), f"{ours}:{LLVM_LIB}", *wrap[1:], exe, cwd=where)
    assert llvm[:2] == (0, "lock returned the pointer: 1, a[N-1]=4194304\n"), llvm
    assert mine[:2] == llvm[:2], mine[2]
    assert mine[2].count("omptarget warning: llvm_omp_target_lock_mem") == 1, mine[2]
    assert "unpinned" in mine[2] and "error" not in mine[2]


BAD_DESCRIPTIONS = {
    "not json": ("{", "not JSON"),
    "a list": ("[]", "expected a JSON object"),
    "no name": ('{"NumArgs": 0}', "missing Name"),
    "too many args": (None, "NumArgs=70000 is not an integer"),
    "args not matching": (None, "ArgPtrs must be a list of NumArgs=3"),
    "a path for a name": (None, "Name='../x' is not a kernel name"),
    "a float geometry": (None, "NumTeamsClause=1.5 is not an integer"),
}


@pytest.mark.parametrize("case", sorted(BAD_DESCRIPTIONS))
def test_the_replayer_refuses_a_malformed_recording_clearly(tmp_path, case):
    """python -m offload.capi.replay validates every field of a description: one error
    line naming the field and the value, exit status 2, no traceback, nothing run."""
    import json
    import subprocess
    import sys
    text, message = BAD_DESCRIPTIONS[case]
    if text is None:
        good = {"Name": "k", "NumArgs": 1, "NumTeamsClause": 1, "ThreadLimitClause": 1,
                "LoopTripCount": 0, "DeviceMemorySize": 0, "DeviceId": 0,
                "BumpAllocVAStart": 4096, "ArgPtrs": [4096], "ArgOffsets": [0]}
        good.update({"too many args": {"NumArgs": 70000},
                     "args not matching": {"NumArgs": 3},
                     "a path for a name": {"Name": "../x"},
                     "a float geometry": {"NumTeamsClause": 1.5}}[case])
        text = json.dumps(good)
    path = tmp_path / "k.json"
    path.write_text(text)
    res = subprocess.run([sys.executable, "-m", "offload.capi.replay", str(path)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OFFLOAD_PLUGINS": "host"})
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1
