"""Tool hooks: the runtime's device data operations (OMPT's target_data_op) and image
loads reported to one process-wide tool, or to none. The C API installs one when an
OMPT tool connects through libomp (offload/capi/ompt.py); nothing else does. With no
tool each hook costs one global lookup."""
from __future__ import annotations

from typing import Any, Protocol

# ompt_target_data_op_t
ALLOC, TO_DEVICE, FROM_DEVICE, DELETE, ASSOCIATE, DISASSOCIATE = 1, 2, 3, 4, 5, 6


class Tool(Protocol):
    def data_op(self, begin: bool, op: int, src: int, src_device: int | None, dst: int,
                dst_device: int | None, size: int) -> None:
        """One end of a data operation; a device of None is the initial (host) device."""

    def image_loaded(self, device: Any, image: bytes) -> None:
        """An OpenMP device image was loaded on plugin device `device` (once per image)."""


#: the tool, or None
tool: Tool | None = None


class _Op:
    """A data operation between its begin and end events (`dst` may be set inside: an
    allocation's address)."""

    __slots__ = ("t", "op", "src", "src_device", "dst", "dst_device", "size")

    def __init__(self, t: Tool | None, op: int, src: int, src_device: int | None, dst: int,
                 dst_device: int | None, size: int):
        self.t, self.op, self.src, self.src_device = t, op, src, src_device
        self.dst, self.dst_device, self.size = dst, dst_device, size

    def __enter__(self) -> _Op:
        if self.t is not None:
            self.t.data_op(True, self.op, self.src, self.src_device, self.dst,
                           self.dst_device, self.size)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.t is not None:
            self.t.data_op(False, self.op, self.src, self.src_device, self.dst,
                           self.dst_device, self.size)


_NONE = _Op(None, 0, 0, None, 0, None, 0)       # what every hook gives without a tool


def data_op(op: int, src: int, src_device: int | None, dst: int, dst_device: int | None,
            size: int) -> _Op:
    """`with data_op(...) as o:` around a data operation: the tool hears its begin and
    its end (also when it fails, as LLVM's RAII does)."""
    t = tool
    return _NONE if t is None else _Op(t, op, src, src_device, dst, dst_device, size)


def note(op: int, src: int, src_device: int | None, dst: int, dst_device: int | None,
         size: int) -> None:
    """Both ends of an operation at once, before it runs (LLVM's form for associations)."""
    with data_op(op, src, src_device, dst, dst_device, size):
        pass


def alloc(device: int, host: int, size: int) -> _Op:
    """An allocation of `size` bytes on global device `device` for host memory `host` (0
    when none): set `.dst` to the address inside."""
    return data_op(ALLOC, host, None, 0, device, size)


def submit(device: int, tgt: int, host: int, size: int) -> _Op:
    return data_op(TO_DEVICE, host, None, tgt, device, size)


def retrieve(device: int, host: int, tgt: int, size: int) -> _Op:
    return data_op(FROM_DEVICE, tgt, device, host, None, size)


def delete(device: int, tgt: int) -> _Op:
    """LLVM's form: the device address and its device as the source, no destination."""
    return data_op(DELETE, tgt, device, 0, -1, 0)


def image_loaded(device: Any, image: bytes) -> None:
    t = tool
    if t is not None:
        t.image_loaded(device, image)
