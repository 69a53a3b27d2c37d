"""compile_c: C source to a host image, through a private, content-addressed cache.

The cache directory (OFFLOAD_CACHE_DIR) is created 0700 and refused when another user
owns it or could write to it. The cache key covers the compiler's identity (resolved
path and version output), the flags and the preprocessed source (so every included
file's contents). Sources and outputs go through unique temporary files, renamed in
atomically; results are read without following symlinks and returned as bytes: what a
plugin loads is exactly what was parsed.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat

from . import config as _config
from .cache_dir import VARIABLE, cache_directory  # noqa: F401 - importers find it here too
from .errors import ErrorCode, OffloadError
from .image import PROTO_SECTION, Image, c_prototypes, format_prototype_table, load_image


@functools.lru_cache(maxsize=16)
def _identity(resolved: str, mtime_ns: int, size: int) -> str:
    import subprocess  # (here and below: not at a C program's start)
    try:
        out = subprocess.run([resolved, "--version"], capture_output=True, text=True,
                             timeout=60)
        version = out.stdout + out.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _not_runnable(resolved, exc) from None
    return f"{resolved}\0{mtime_ns}\0{size}\0{version}"


def _not_runnable(cc: str, exc: BaseException) -> OffloadError:
    """Why the compiler could not be started; out of file descriptors or processes is
    the machine's limit, named, not a missing compiler."""
    import errno
    import resource
    code = getattr(exc, "errno", None)
    if code in (errno.EMFILE, errno.ENFILE):
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return OffloadError(ErrorCode.OUT_OF_RESOURCES,
                            f"cannot start the C compiler {cc!r}: out of file descriptors "
                            f"(RLIMIT_NOFILE is {soft}): {exc}")
    if code in (errno.EAGAIN, errno.ENOMEM):
        return OffloadError(ErrorCode.OUT_OF_RESOURCES,
                            f"cannot start the C compiler {cc!r}: out of processes or memory: "
                            f"{exc}")
    return OffloadError(ErrorCode.UNSUPPORTED, f"C compiler {cc!r} not runnable: {exc}")


def compiler_identity(cc: str) -> str:
    """The resolved path, file stamp and `--version` output of compiler `cc`."""
    found = shutil.which(cc)
    if found is None:
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"C compiler {cc!r} not found (set OFFLOAD_CC or CC)")
    resolved = os.path.realpath(found)
    st = os.stat(resolved)
    return _identity(resolved, st.st_mtime_ns, st.st_size)


def _run(cmd: list[str], what: str, stdin: str | None = None) -> str:
    import subprocess
    try:
        res = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    except OSError as exc:
        raise _not_runnable(cmd[0], exc) from None
    if res.returncode != 0:
        if "Too many open files" in res.stderr:      # the compiler ran out, not the source
            import resource
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                               f"compile_c failed ({what}): out of file descriptors "
                               f"(RLIMIT_NOFILE is {soft}):\n{res.stderr.strip()}")
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"compile_c failed ({what}: {' '.join(cmd)}):\n{res.stderr.strip()}")
    return res.stdout


def _read_own(path: str) -> bytes | None:
    """The bytes of a file we own in the cache, opened without following symlinks; None
    when it is missing (or is not a plain file of ours, which is then ignored)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _source_with_prototypes(source: str) -> str:
    protos = c_prototypes(source)
    table = format_prototype_table(protos).replace("\\", "\\\\").replace('"', '\\"')
    table = table.replace("\n", "\\n").replace("\t", "\\t")
    return (source + "\n__attribute__((used, section(\"" + PROTO_SECTION + "\"))) "
            "static const char offload_prototype_table_[] = \"" + table + "\";\n")


def compile_c(source: str, *, flags: tuple[str, ...] = ("-O2",), cc: str | None = None,
              cache_dir: str | None = None) -> Image:
    """Compile C source into a host image (a shared object), cached by content.

    The prototypes of its external functions travel inside the ELF file (section
    .offload_protos), so the image's kernels are typed from C. Many threads and
    processes may compile the same source at once.

    Args:
        source: C source defining the kernels (plain C functions).
        flags: compiler flags (default -O2); part of the cache key.
        cc: the compiler (default OFFLOAD_CC, else $CC, else cc).
        cache_dir: the cache (default OFFLOAD_CACHE_DIR, else ~/.cache/offload).

    Returns:
        An Image whose kernels are attributes: `compile_c(src).add_one`.

    Raises:
        OffloadError: INVALID_ARGUMENT with the compiler's messages when the source does
            not compile; UNSUPPORTED without a compiler; INVALID_VALUE naming
            OFFLOAD_CACHE_DIR when the cache is unusable or not private.

    Example:
        >>> k = offload.compile_c("void inc(int *a) { *a += 1; }")
    """
    cfg = _config.read()
    cc = cc or cfg.cc
    directory = cache_directory(cache_dir or cfg.cache_dir)
    full = _source_with_prototypes(source)
    flags = tuple(flags)
    identity = compiler_identity(cc)
    preprocessed = _run([cc, "-E", *flags, "-x", "c", "-"], "preprocessing", full)
    key = hashlib.sha256("\0".join((identity, " ".join(flags), preprocessed))
                         .encode()).hexdigest()[:40]
    out = os.path.join(directory, f"k-{key}.so")
    data = _read_own(out)
    if data is None:
        import tempfile
        fd, src = tempfile.mkstemp(dir=directory, prefix=f"k-{key}.", suffix=".c")
        fdo, tmp = tempfile.mkstemp(dir=directory, prefix=f"k-{key}.", suffix=".so.tmp")
        os.close(fdo)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(full)
            _run([cc, "-shared", "-fPIC", *flags, "-o", tmp, src], "compiling")
            data = _read_own(tmp)
            if data is None:
                raise OffloadError(ErrorCode.BACKEND_FAILURE,
                                   f"compile_c: the compiler's output {tmp!r} vanished")
            os.replace(tmp, out)                      # atomic: readers see all or nothing
        finally:
            for leftover in (src, tmp):
                try:
                    os.unlink(leftover)
                except FileNotFoundError:
                    pass
    return load_image(data)
