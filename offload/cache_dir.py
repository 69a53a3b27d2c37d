"""Where offload keeps what it builds (OFFLOAD_CACHE_DIR, default ~/.cache/offload), and
the rule every cache in it follows: a directory only this user can write, since what is
in it is loaded and run."""
from __future__ import annotations

import os
import stat

from .errors import ErrorCode, OffloadError


def default_root() -> str:
    """OFFLOAD_CACHE_DIR, else ~/.cache/offload."""
    return os.environ.get("OFFLOAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"),
                                                               ".cache", "offload")


VARIABLE = "OFFLOAD_CACHE_DIR"


def cache_directory(path: str) -> str:
    """`path`, created 0700 if missing; OffloadError naming OFFLOAD_CACHE_DIR when it is
    unusable, owned by another user, or writable by group or others."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{VARIABLE}={path!r} is not usable as the compile cache: "
                           f"{exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OffloadError(ErrorCode.INVALID_VALUE, f"{VARIABLE}={path!r} is not a directory")
    if st.st_uid != os.geteuid():
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{VARIABLE}={path!r} is owned by uid {st.st_uid}, not by you "
                           f"(uid {os.geteuid()}): another user could plant code in it")
    if st.st_mode & 0o022:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{VARIABLE}={path!r} is writable by group or others (mode "
                           f"{stat.S_IMODE(st.st_mode):o}): another user could plant code in "
                           f"it; chmod 700 it or choose another directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{VARIABLE}={path!r} is not writable by you")
    return path
