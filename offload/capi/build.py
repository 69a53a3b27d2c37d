"""Build offload's drop-in `libomptarget.so.19.1` with cffi's embedding mode: a shared
library exporting LLVM 19's functions (version node VERS1.0) whose bodies run in Python,
in the process's own interpreter when there is one (a Python program loading C code),
else in one the library starts (a C program). Built once per offload version, install
path and Python executable, into the private compile cache."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib import metadata

import cffi

from .. import config as _config
from ..compiler import cache_directory
from ..errors import ErrorCode, OffloadError
from .abi import (
    DATA_EXPORTS,
    EXPORTS,
    FIRST_STEPS,
    KERNEL_EXPORTS,
    KERNEL_GENERAL,
    SONAME,
    TYPES,
    VERSION_NODE,
)

_MODULE = "_offload_capi"

# runs in the library's interpreter before the first export returns: the paths this
# Python found offload and its dependencies on, then the Python bodies of the exports
_INIT = '''
import sys
for _p in reversed(%r):
    if _p not in sys.path:
        sys.path.insert(0, _p)
try:
    from _offload_capi import ffi, lib
    from offload.capi import exports
    exports.bind(ffi, lib)
except BaseException as _exc:      # no export may then return cffi's silent 0
    import os
    sys.stderr.write("omptarget fatal error 1: offload's libomptarget could not start "
                     "its Python side: %%s: %%s\\n" %% (type(_exc).__name__, _exc))
    sys.stderr.flush()
    os.abort()
'''


def _version() -> str:
    try:
        return metadata.version("offload")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# what the library's interpreter imports besides the standard library
_DEPENDENCIES = ("cffi", "_cffi_backend", "pycparser", "numpy", "elftools")


def _paths() -> list[str]:
    """The library interpreter's module search path: the standard library first, then
    the directories this process finds offload and its dependencies in, and nothing
    else (never the working directory or another sys.path entry: a module planted
    there, say a json.py in the directory --libdir was run from, must not be imported
    by every C program on the library)."""
    import importlib.util
    out = []
    for p in (os.path.dirname(os.__file__), sysconfig.get_config_var("DESTSHARED") or ""):
        if p and os.path.isdir(p) and p not in out:
            out.append(os.path.abspath(p))
    wanted = [_package_root()]
    for name in _DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        where = os.path.dirname(os.path.abspath(spec.origin))
        if spec.submodule_search_locations is not None:      # a package: its parent
            where = os.path.dirname(where)
        wanted.append(where)
    for p in wanted:
        if p not in out:
            out.append(p)
    return out


# In a C program the library starts Python itself (start.c), before cffi would (cffi's
# bootstrap imports _cffi_backend from the interpreter's default path, which may be another
# cffi than the one offload runs with): an isolated configuration whose module search path
# is this process's, so the program's environment cannot swap offload's code either.


def _c_literal(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _split(decl: str) -> tuple[str, str, str, list[str]]:
    """(return type, name, parameter list, parameter names) of a C declaration."""
    head, params = decl.rstrip(";").split("(", 1)
    params = params.rsplit(")", 1)[0].strip()
    ret, name = head.rsplit(None, 1)
    while name.startswith("*"):
        ret, name = ret + " *", name[1:]
    names = [] if params == "void" else \
        [p.replace("*", " ").split()[-1] for p in params.split(",")]
    return ret.strip(), name, params, names


# exports whose bodies are C (ompt.c), and the C functions the Python side calls
_IN_C = ("ompt_libomptarget_connect",)
_C_HELPERS = """
int offload_ompt_connect(void);
void offload_ompt_target(int kind, int begin, int device);
void offload_ompt_data_op(int begin, int op, uintptr_t src, int src_device, uintptr_t dst,
                          int dst_device, size_t size);
void offload_ompt_submit(int begin, unsigned teams);
void offload_ompt_device_initialize(int device, const char *type);
void offload_ompt_device_finalize(int device);
void offload_ompt_device_load(int device, uintptr_t image, size_t size);
void offload_set_hot(uintptr_t fn, uintptr_t data_fn);
"""


def _wrappers() -> str:
    """Each export as a C function that calls its Python body through cffi, unless the
    process's Python has been finalized (a library's atexit unregistration after a Python
    program ended): then it returns what LLVM returns for nothing done. The outermost
    export keeps its return address for OMPT's codeptr_ra while it runs."""
    out = []
    for name, decl in EXPORTS.items():
        if name in _IN_C:
            continue
        ret, name, params, names = _split(decl)
        call = f"_offload_{name}({', '.join(names)})"
        out.append(f"{ret} _offload_{name}({params});")
        enter = ("const int outer = !offload_return_address; "
                 "if (outer) offload_return_address = __builtin_return_address(0); ")
        leave = "if (outer) offload_return_address = NULL; "
        number = _data_export(name)
        if number is not None:    # one component, no mapper: the core's kept, data_one first
            loc = "loc" if "loc" in names else "NULL"
            mapper = " && (mappers == NULL || mappers[0] == NULL)" if "mappers" in names else ""
            first = (f"({loc}, {number}, dev, (uintptr_t)bases[0], (uintptr_t)begins[0], "
                     "sizes[0], (uint64_t)types[0])")
            one = f"(n == 1{mapper} && (offload_kept_data{first} || _offload_data_one{first}))"
            body = f"{enter}if (Py_IsInitialized() && !{one}) {call}; {leave}"
        elif name in KERNEL_EXPORTS:          # read in C: the core's kept region, kernel_one, _many
            head = (f"loc, {KERNEL_EXPORTS.index(name)}, dev, num_teams, thread_limit, "
                    "(uintptr_t)host_ptr, k->Tripcount, (int32_t)n, ")
            one = (f"_offload_kernel_one({head}n ? (uintptr_t)k->ArgBasePtrs[0] : 0, "
                   "n ? (uintptr_t)k->ArgPtrs[0] : 0, n ? k->ArgSizes[0] : 0, "
                   "n ? (uint64_t)k->ArgTypes[0] : 0)")
            arrays = ("(uintptr_t)k->ArgBasePtrs, (uintptr_t)k->ArgPtrs, "
                      "(uintptr_t)k->ArgSizes, (uintptr_t)k->ArgTypes, (uintptr_t)k->ArgMappers")
            kept = f"offload_kept({KERNEL_GENERAL}, {head}{arrays})"
            many = f"_offload_kernel_many({head}{arrays})"
            body = (f"{enter}int r = 0; const KernelArgsTy *k = args; "
                    "const uint32_t n = k ? k->NumArgs : 0; "
                    "if (!Py_IsInitialized()) r = 0; "
                    f"else if (k && (r = {kept}) != {KERNEL_GENERAL}) ; "
                    "else if (k && n <= 1 && (n == 0 || k->ArgMappers == NULL || "
                    f"k->ArgMappers[0] == NULL) && (r = {one}) != {KERNEL_GENERAL}) ; "
                    f"else if (k && n && (r = {many}) != {KERNEL_GENERAL}) ; "
                    f"else r = {call}; {leave}return r;")
        elif ret == "void":
            body = f"{enter}if (Py_IsInitialized()) {call}; {leave}"
        else:
            body = (f"{enter}{ret} r = Py_IsInitialized() ? {call} : ({ret})0; {leave}"
                    f"return r;")
        out.append(f"__attribute__((visibility(\"default\"))) {ret} {name}({params}) {{ {body} }}")
    return "\n".join(out)


def _data_export(name: str) -> int | None:
    """The number in DATA_EXPORTS of a data construct's export; None for other exports."""
    return next((i for i, (n, _) in enumerate(DATA_EXPORTS) if n == name), None)


def _part(name: str) -> str:
    """The text of one of the library's C files (start.c, ompt.c)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)) as f:
        return f.read()


def _c_source() -> str:
    ffi = cffi.FFI()
    ffi.embedding_api("\n".join(decl.replace(f" {name}(", f" _offload_{name}(", 1)
                                 .replace(f"*{name}(", f"*_offload_{name}(", 1)
                                 for name, decl in EXPORTS.items() if name not in _IN_C)
                     + "".join("\n" + decl.replace(f" {name}(", f" _offload_{name}(", 1)
                               for name, (decl, _) in FIRST_STEPS.items()))
    ffi.cdef(_C_HELPERS)
    paths = " ".join(_c_literal(p) + "," for p in _paths())
    start = f"static const char *const offload_paths[] = {{ {paths} NULL }};\n"
    ffi.set_source(_MODULE, start + _part("start.c") + TYPES + _part("ompt.c")
                   + _part("kept.c") + _wrappers())
    ffi.embedding_init_code(_INIT % (_paths(),))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "capi.c")
        with contextlib.redirect_stdout(io.StringIO()):    # cffi says "generating ..."
            ffi.emit_c_code(path)
        with open(path) as f:
            return f.read()


def _python_link() -> tuple[str, list[str]]:
    """The include directory and the link flags for this Python's shared library."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"{sys.executable} has no shared libpython (built without "
                           f"--enable-shared): the C API library needs one to embed Python")
    libdir = sysconfig.get_config_var("LIBDIR")
    ver = sysconfig.get_config_var("LDVERSION") or sysconfig.get_python_version()
    return sysconfig.get_paths()["include"], [f"-L{libdir}", f"-lpython{ver}",
                                              f"-Wl,-rpath,{libdir}"]


def libdir(cache_dir: str | None = None, cc: str | None = None) -> str:
    """The directory holding `libomptarget.so.19.1` for this offload and this Python,
    built on first use (`python -m offload.capi --libdir` prints it)."""
    cfg = _config.read()
    directory = cache_directory(cache_dir or cfg.cache_dir)
    source = _c_source()
    key = hashlib.sha256("\0".join((_version(), _package_root(), sys.executable,
                                    source)).encode()).hexdigest()[:24]
    out = os.path.join(directory, f"capi-{key}")
    lib = os.path.join(out, SONAME)
    if os.path.isfile(lib) and os.stat(lib).st_uid == os.geteuid():
        return out
    cc = cc or cfg.cc
    if shutil.which(cc) is None:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"C compiler {cc!r} not found (set OFFLOAD_CC or CC)")
    include, link = _python_link()
    tmp = tempfile.mkdtemp(dir=directory, prefix=f"capi-{key}.")
    try:
        src = os.path.join(tmp, "capi.c")
        with open(src, "w") as f:
            f.write(source)
        script = os.path.join(tmp, "exports.map")
        with open(script, "w") as f:
            f.write(f"{VERSION_NODE} {{\n  global:\n")
            f.writelines(f"    {name};\n" for name in EXPORTS)
            f.write("  local: *;\n};\n")
        cmd = [cc, "-shared", "-fPIC", "-O2", f"-I{include}", src, "-o",
               os.path.join(tmp, SONAME), f"-Wl,-soname,{SONAME}",
               f"-Wl,--version-script={script}", *link]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise OffloadError(ErrorCode.BACKEND_FAILURE,
                               f"building {SONAME} failed ({' '.join(cmd)}):\n"
                               f"{res.stderr.strip()}")
        os.symlink(SONAME, os.path.join(tmp, "libomptarget.so"))
        try:
            os.rename(tmp, out)                 # atomic: a whole directory or none
        except OSError:
            if not os.path.isfile(lib):         # not another builder winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
