"""LLVM's diagnostics, word for word, with the array and a hint after them; and the
LIBOMPTARGET_INFO messages (each line `omptarget device N info: ...`)."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from .clauses import MapItem
from .entries import HostDataToTarget, count_text
from .errors import ErrorCode, OffloadError

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def caller() -> str:
    """'file.py:LINE:0' of the first frame outside offload (LLVM prints 'file.c:L:C')."""
    f: Any = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f = f.f_back
    if f is None:
        return "unknown:0:0"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}:0"


#: LLVM 19's error line after a map clause's failed getTargetPointer, by cause
NULL_PRESENT = "Call to getTargetPointer returned null pointer ('present' map type modifier)."
NULL_ILLEGAL = "Call to getTargetPointer returned null pointer (device failure or illegal mapping)."


def error(sentences: list[str], it: MapItem | None, hint: str,
          code: ErrorCode = ErrorCode.INVALID_ARGUMENT, after: str = "") -> OffloadError:
    """An OffloadError: LLVM's sentences first (one per line, in LLVM's order), then the
    mapped array and a hint. The sentences are LLVM's messages and `after` its error line
    (NULL_PRESENT, NULL_ILLEGAL), for the drop-in library to print as LLVM does."""
    tail = f"({it.subject()}; {hint})" if it is not None else f"({hint})"
    return OffloadError(code, "\n".join(sentences) + "\n  " + tail,
                        llvm_messages=tuple(sentences), llvm_errors=(after,) if after else ())


def present_missing(p: int, n: int, motion: bool = False) -> str:
    kind = "motion" if motion else "map type"
    return (f"device mapping required by 'present' {kind} modifier does not exist for host "
            f"address 0x{p:x} ({n} bytes)")


def explicit_extension(p: int, n: int, hst: int, size: int) -> str:
    return (f"explicit extension not allowed: host address specified is 0x{p:x} ({n} bytes), "
            f"but device allocation maps to host at 0x{hst:x} ({size} bytes)")


def say(device: int, msg: str) -> None:
    """One LIBOMPTARGET_INFO line on stderr."""
    print(f"omptarget device {device} info: {msg}", file=sys.stderr)


def plugin_say(device: int, msg: str) -> None:
    """One LIBOMPTARGET_INFO line of a plugin (LLVM's `"PluginInterface" device N info:`,
    N the plugin's own device number) on stderr."""
    print(f'"PluginInterface" device {device} info: {msg}', file=sys.stderr)


def dump_table(number: int, entries: Sequence[HostDataToTarget], where: str) -> str:
    """A mapping table as LLVM's dumpTargetPointerMappings prints it, every line prefixed
    `omptarget device N info:`."""
    head = f"omptarget device {number} info: "
    if not entries:
        return f"{head}OpenMP Host-Device pointer mappings table empty"
    lines = [f"{head}OpenMP Host-Device pointer mappings after block at {where}:",
             f"{head}{'Host Ptr':<18} {'Target Ptr':<18} Size (B) DynRefCount HoldRefCount "
             f"Declaration"]
    for e in entries:
        lines.append(f"{head}0x{e.hst_begin:016x} 0x{e.tgt_begin:016x} {e.size:<8} "
                     f"{count_text(e.dyn):<11} {count_text(e.hold):<12} "
                     f"{e.name or 'unknown'} at {e.where}")
    return "\n".join(lines)
