"""Item 2: a C program's start-up on the drop-in library imports only what a C
program needs: no numpy (its constructs pass addresses), no C parser (cffi declarations
come from modules cffi wrote once, offload/ffi_cache.py), no importlib.metadata (no
entry-point scan when only built-in plugins are asked for), no pyelftools (no image is
parsed), no `site`. Checked by what is imported, not by time."""
import os
import subprocess
import sys
import textwrap

import pytest

from offload import ffi_cache
from tests.capi_support import LLVM_LIB, built, ours, run  # noqa: F401 - fixtures

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NOT_AT_START = ("numpy", "pycparser", "importlib.metadata", "elftools", "offload.capi.build",
                "site", "concurrent.futures", "logging", "subprocess", "tempfile", "json",
                "platform", "glob")


def _imported(stderr: str) -> set[str]:
    """Module names from PYTHONPROFILEIMPORTTIME's lines."""
    return {line.split("|")[2].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line and "self [us]" not in line}


def test_a_c_program_starts_without_what_it_does_not_need(built, ours, tmp_path):  # noqa: F811
    env = dict(OFFLOAD_CACHE_DIR=str(tmp_path / "cache"), PYTHONPROFILEIMPORTTIME="1")
    rc, out, err = run(built["profile_events.c"], f"{ours}:{LLVM_LIB}", **env)   # writes
    assert (rc, out) == (0, "1000\n"), err
    rc, out, err = run(built["profile_events.c"], f"{ours}:{LLVM_LIB}", **env)   # reads
    assert (rc, out) == (0, "1000\n"), err
    names = _imported(err)
    # (importlib.import_module, which loads the plugin, is not logged: what it imports is)
    assert "offload.capi.exports" in names and "offload.plugins._host_memory" in names, \
        [n for n in sorted(names) if n.startswith("offload")]
    loaded = sorted(n for n in names if n.split(".")[0] in ("numpy", "pycparser", "elftools")
                    or n in NOT_AT_START)
    assert loaded == [], loaded


def _child(code: str, cache: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, OFFLOAD_CACHE_DIR=cache, PYTHONPATH=os.pathsep
                                   .join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))))


def test_declarations_are_parsed_once_per_machine(tmp_path):
    code = """
        import sys
        sys._offload_capi_owns_python = True      # (a Python program parses elsewhere)
        from offload.ffi_cache import ffi_for
        ffi = ffi_for("t", "typedef struct { int a; double b; } S; int abs(int);")
        s = ffi.new("S *", {"a": 3, "b": 0.5})
        print(s.a, s.b, ffi.dlopen(None).abs(-4), ffi.sizeof("S"), "pycparser" in sys.modules)
    """
    cache = str(tmp_path / "cache")
    first = _child(code, cache)
    assert first.returncode == 0 and first.stdout == "3 0.5 4 16 True\n", first.stderr
    files = os.listdir(os.path.join(cache, "ffi"))
    assert [f for f in files if f.endswith(".py")] and not [f for f in files if ".tmp" in f]
    again = _child(code, cache)
    assert again.returncode == 0 and again.stdout == "3 0.5 4 16 False\n", again.stderr


def test_an_unwritable_or_damaged_cache_still_gives_the_declarations(tmp_path):
    code = """
        from offload.ffi_cache import ffi_for
        ffi = ffi_for("t", "int abs(int);")
        print(ffi.dlopen(None).abs(-5))
    """
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")                              # the cache "directory" is a file
    res = _child(code, str(blocked))
    assert res.returncode == 0 and res.stdout == "5\n", res.stderr
    cache = tmp_path / "cache"
    assert _child(code, str(cache)).returncode == 0
    written, = [f for f in (cache / "ffi").iterdir() if f.name.startswith("_offload_ffi_t_")
                and f.suffix == ".py"]
    written.write_text("raise RuntimeError('damaged')\n")
    res = _child(code, str(cache))
    assert res.returncode == 0 and res.stdout == "5\n", res.stderr
    assert "ignoring the damaged cffi cache file" in res.stderr and "damaged" in res.stderr


def test_numpy_arrives_on_first_use_in_a_c_program_s_interpreter(tmp_path):
    code = """
        import sys
        sys._offload_capi_owns_python = True
        from offload._lazy import numpy, numpy_imported
        import offload
        print(numpy_imported(), "numpy" in sys.modules, "importlib.metadata" in sys.modules)
        print(numpy.arange(3).sum(), numpy_imported(), offload.compile_c.__name__,
              offload.__version__ != "")
    """
    res = _child(code, str(tmp_path / "cache"))
    assert res.returncode == 0 and res.stdout == "False False False\n3 True compile_c True\n", \
        res.stderr


def test_ffi_cache_keys_on_the_declarations(tmp_path, monkeypatch):
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(tmp_path))
    a = ffi_cache.ffi_for("k", "int abs(int);")
    b = ffi_cache.ffi_for("k", "long labs(long);")
    assert a.dlopen(None).abs(-1) == 1 and b.dlopen(None).labs(-2) == 2
    with pytest.raises(AttributeError):
        a.dlopen(None).labs                             # noqa: B018 - not declared there
    assert len([f for f in os.listdir(tmp_path / "ffi") if f.endswith(".py")]) == 2


def test_a_cache_others_can_write_is_not_run(tmp_path):
    """What is in the cache is run, so a cache directory another user could write to (or
    owns) is not used: a module planted there under the expected name is never imported;
    the declarations are parsed in the process instead."""
    cache = tmp_path / "cache"
    (cache / "ffi").mkdir(parents=True)
    cdef = "int abs(int);"
    planted = cache / "ffi" / (ffi_cache.module_name("t", cdef) + ".py")
    planted.write_text("import sys; sys.stdout.write('PLANTED'); raise SystemExit(9)\n")
    os.chmod(cache, 0o777)
    code = """
        from offload.ffi_cache import ffi_for
        print(ffi_for("t", "int abs(int);").dlopen(None).abs(-6))
    """
    res = _child(code, str(cache))
    assert res.returncode == 0 and res.stdout == "6\n", res.stdout + res.stderr
    os.chmod(cache, 0o700)
    os.chmod(cache / "ffi", 0o770)
    res = _child(code, str(cache))
    assert res.returncode == 0 and res.stdout == "6\n", res.stdout + res.stderr
