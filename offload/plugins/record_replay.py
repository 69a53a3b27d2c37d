"""Kernel record and replay (LLVM 19's RecordReplayTy, the files llvm-omp-kernel-replay
reads): one block of device memory reserved per device, every later device allocation a
16-byte-aligned bump inside it (so a snapshot of the block is all the device data and
recorded pointers stay valid); at each OpenMP kernel launch while recording,
`<kernel>.json` (the launch), `<kernel>.image` and `<kernel>.memory` (the used block
before it), and with save-output `<kernel>.original.output` after it; while replaying,
`<kernel>.replay.output` after it. Files go to the current directory, as LLVM's."""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence

from .. import locks
from ..errors import ErrorCode, OffloadError
from ._libc import _ffi

_ALIGN = 16


def _write_file(path: str, data: bytes | bytearray) -> None:
    """`data` as the file `path` (in the current directory): written into a new file made
    with O_EXCL | O_NOFOLLOW beside it, then renamed over `path`, so a symlink planted
    under that name is replaced, never followed (its target is left as it was)."""
    name = os.path.basename(path)
    if not name or name != path or name.startswith("."):
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"recording: {path!r} is not a file name for the current directory")
    tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Arena:
    """The reserved block of one device and its bump pointer."""

    def __init__(self, start: int, size: int, recording: bool, save_output: bool,
                 device_id: int, retrieve: Callable[[int, int, int], None]):
        self.start, self.size = start, size
        self.used = 0
        self.recording, self.save_output = recording, save_output
        self.device_id = device_id
        self._retrieve = retrieve          # (host, device address, bytes): a device copy out
        self._lock = locks.new_lock()

    def take(self, size: int) -> int | None:
        """`size` bytes from the block (16-byte aligned); None when it is full."""
        n = (size + _ALIGN - 1) & ~(_ALIGN - 1)
        with self._lock:
            if self.used + n > self.size:
                return None
            addr = self.start + self.used
            self.used += n
        return addr

    def holds(self, addr: int) -> bool:
        return self.start <= addr < self.start + self.size

    def snapshot(self, path: str, length: int | None = None) -> None:
        """The used part of the block (its first `length` bytes), as it is on the device,
        into `path`."""
        n = self.used if length is None else length
        data = bytearray(n)
        if n:
            buf = _ffi.from_buffer(data)
            self._retrieve(int(_ffi.cast("uintptr_t", buf)), self.start, n)
        _write_file(path, data)

    def before_launch(self, name: str, image: bytes | None) -> None:
        """While recording: the image and the memory the launch starts from."""
        if not self.recording:
            return
        if image is not None:
            _write_file(f"{name}.image", image)
        self.snapshot(f"{name}.memory")

    def after_launch(self, name: str, args: Sequence[int], blocks: int, threads: int,
                     tripcount: int, used_before: int) -> None:
        """While recording: the launch as it ran (the geometry it got, as LLVM records
        it, so a replay runs it the same way); with save-output, the memory after it: the
        part the launch started with (what a replay is given; what the launch itself
        allocated, such as a launch environment made once per process, is left out, so a
        recording and its replay compare)."""
        if self.recording:
            desc = {"Name": name, "NumArgs": len(args), "NumTeamsClause": blocks,
                    "ThreadLimitClause": threads, "LoopTripCount": tripcount,
                    "DeviceMemorySize": used_before, "DeviceId": self.device_id,
                    "BumpAllocVAStart": self.start,
                    "ArgPtrs": [a - (1 << 64) if a >= 1 << 63 else a for a in args],
                    "ArgOffsets": [0] * len(args)}
            import json  # (not at a C program's start)
            _write_file(f"{name}.json", json.dumps(desc).encode())
        if self.save_output:
            self.snapshot(f"{name}.original.output" if self.recording
                          else f"{name}.replay.output", used_before)
