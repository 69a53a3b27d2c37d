"""Registered programs: the `__tgt_bin_desc`s clang-19 executables and libraries hand to
`__tgt_register_lib`, their offload entries and their device images by kind (the plugins
load them: GenericDevice.omp_load)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import locks
from ..errors import ErrorCode, OffloadError
from ..ffi_cache import ffi_for
from .abi import ENTRY_INDIRECT, ENTRY_LINK, ENTRY_REQUIRES, LIBOMP, TYPES

#: the ABI's structures, and libomp's functions (devices.py)
ffi = ffi_for("capi", TYPES + LIBOMP)
_ELF_MAGIC = b"\x7fELF"
_MACHINES = {62: "x86_64", 190: "nvptx"}        # ELF e_machine of the images we run


_T_UINTPTR = ffi.typeof("uintptr_t")
_cast = getattr(ffi, "_backend", ffi).cast   # cast without a type-name lookup


def image_kind(data: bytes) -> str | None:
    """The plugins' name for a device image's kind ("x86_64", "nvptx"), from its ELF
    header; None for anything else."""
    return _MACHINES.get(int.from_bytes(data[18:20], "little")) \
        if data[:4] == _ELF_MAGIC else None


def addr(p: Any) -> int:
    """A cdata pointer (of any FFI) as an int."""
    return int(_cast(_T_UINTPTR, p)) if not isinstance(p, int) else p


@dataclass
class Entry:
    """One offload entry: a kernel (size 0: `addr` is the host region id) or a global."""

    addr: int
    name: str
    size: int
    flags: int
    data: int


@dataclass
class Program:
    """One registered __tgt_bin_desc."""

    desc: int
    entries: list[Entry]
    images: dict[str, bytes]                # "x86_64" / "nvptx" -> the raw inner ELF image
    starts: dict[str, int]                  # the same kinds -> where the image lies in memory
    requires: int = 0


class Registry:
    """Every registered program; kernels by host region id; images loaded per device."""

    def __init__(self) -> None:
        self.lock = locks.RLock()
        self.programs: dict[int, Program] = {}
        self.kernels: dict[int, tuple[Program, Entry]] = {}
        self.requires = 0
        self.version = 0                    # bumped by every (un)registration

    def register(self, desc_addr: int) -> Program:
        desc = ffi.cast("__tgt_bin_desc *", desc_addr)
        entries = [_entry(e) for e in _entries(desc.HostEntriesBegin, desc.HostEntriesEnd)]
        images: dict[str, bytes] = {}
        starts: dict[str, int] = {}
        for i in range(desc.NumDeviceImages):
            img = desc.DeviceImages[i]
            start, end = addr(img.ImageStart), addr(img.ImageEnd)
            data = ffi.buffer(ffi.cast("char *", start), end - start)[:]
            kind = image_kind(data)
            if kind is not None and kind not in images:
                images[kind], starts[kind] = data, start
        prog = Program(desc_addr, entries, images, starts)
        with self.lock:
            self.version += 1
            self.programs[desc_addr] = prog
            for e in entries:
                if e.flags & ENTRY_REQUIRES:
                    prog.requires |= e.data
                    self.requires |= e.data
                elif e.size == 0 and not e.flags & ENTRY_INDIRECT:
                    self.kernels[e.addr] = (prog, e)
        return prog

    def unregister(self, desc_addr: int) -> Program | None:
        with self.lock:
            self.version += 1
            prog = self.programs.pop(desc_addr, None)
            if prog is not None:
                for e in prog.entries:
                    if self.kernels.get(e.addr, (None,))[0] is prog:
                        del self.kernels[e.addr]
            return prog

    def kernel(self, host_ptr: int) -> tuple[Program, Entry]:
        with self.lock:
            found = self.kernels.get(host_ptr)
        if found is None:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"no registered kernel has host region id 0x{host_ptr:x}")
        return found

    def kinds(self) -> set[str]:
        """The kinds of device image the registered programs carry."""
        with self.lock:
            return {k for p in self.programs.values() for k in p.images}


def _entries(begin: Any, end: Any) -> list[Any]:
    n = (addr(end) - addr(begin)) // ffi.sizeof("__tgt_offload_entry")
    return [begin[i] for i in range(n)]


def _entry(e: Any) -> Entry:
    name = ffi.string(e.name).decode(errors="replace") if e.name != ffi.NULL else ""
    return Entry(addr(e.addr), name, int(e.size), int(e.flags), int(e.data))


def is_link(e: Entry) -> bool:
    return bool(e.flags & ENTRY_LINK)
