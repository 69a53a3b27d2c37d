"""The one error model: OffloadError carrying an ErrorCode (LLVM's names)."""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Error codes, named as in LLVM offload's ol_errc_t."""

    SUCCESS = 0
    UNKNOWN = 1
    INVALID_VALUE = 2
    INVALID_ARGUMENT = 3
    OUT_OF_RESOURCES = 4
    NOT_FOUND = 5
    UNSUPPORTED = 6
    INVALID_BINARY = 7
    INVALID_DEVICE = 8
    BACKEND_FAILURE = 9
    UNINITIALIZED = 10


class OffloadError(Exception):
    """Any failure inside the runtime; `code` says which kind. `llvm_messages` and
    `llvm_errors`, where set, are the lines LLVM 19 prints for it (`omptarget message:`,
    then `omptarget error:`), which the drop-in library prints in its place."""

    def __init__(self, code: ErrorCode, message: str, *, llvm_messages: tuple[str, ...] = (),
                 llvm_errors: tuple[str, ...] = ()):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.llvm_messages = llvm_messages
        self.llvm_errors = llvm_errors

    def __str__(self) -> str:
        return f"{self.message} [{self.code.name}]"


class OffloadBufferError(OffloadError, BufferError):
    """An export the producer cannot make (DLPack's `copy=True`, another `dl_device`):
    the BufferError the DLPack protocol names for it, and an OffloadError."""


class OffloadWarning(UserWarning):
    """Something ran, but not as asked: a kernel with no binary for its device ran on
    the host instead (OMP_TARGET_OFFLOAD=default)."""
