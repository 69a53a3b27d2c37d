"""Device images: ELF inspection with pyelftools, kernel lookup, compile_c.

An `Image` bundles one `Binary` per target; its kernels are attributes
(`image.add_one`), and a device runs the first binary its plugin accepts.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import ErrorCode, OffloadError

PROTO_SECTION = ".offload_protos"


@dataclass(frozen=True)
class ElfInfo:
    elf_class: int          # 32 or 64
    little_endian: bool
    machine: str            # pyelftools' name, e.g. 'EM_X86_64', 'EM_CUDA', 'EM_AMDGPU'
    type: str               # 'ET_DYN', 'ET_EXEC', 'ET_REL'
    flags: int
    osabi: str
    abiversion: int
    functions: frozenset    # defined function symbols
    objects: frozenset      # defined data symbols (AMDGPU kernel descriptors live here)
    sections: dict = field(default_factory=dict)   # interesting sections' bytes

    def describe(self) -> str:
        end = "LSB" if self.little_endian else "MSB"
        return f"ELF{self.elf_class} {end} {self.machine} {self.type}"


def read_elf(data: bytes) -> ElfInfo:
    """Parse an ELF header and symbol tables; OffloadError(INVALID_BINARY) if not ELF."""
    if data[:4] != b"\x7fELF":
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"not an ELF image (starts with {bytes(data[:8])!r})")
    from elftools.common.exceptions import ELFError  # here: a C program may never
    from elftools.elf.elffile import ELFFile  # parse an image (start-up)
    from elftools.elf.sections import SymbolTableSection
    try:
        elf = ELFFile(io.BytesIO(data))
        h = elf.header
        funcs, objs, sections = set(), set(), {}
        for sec in elf.iter_sections():
            if sec.name in (PROTO_SECTION, ".note", ".nv.info"):
                sections[sec.name] = sec.data()
            if not isinstance(sec, SymbolTableSection):
                continue
            for sym in sec.iter_symbols():
                if sym["st_shndx"] == "SHN_UNDEF" or not sym.name:
                    continue
                if sym["st_info"]["bind"] == "STB_LOCAL":
                    continue
                kind = sym["st_info"]["type"]
                if kind in ("STT_FUNC", "STT_GNU_IFUNC"):
                    funcs.add(sym.name)
                elif kind == "STT_OBJECT":
                    objs.add(sym.name)
        return ElfInfo(elf_class=elf.elfclass, little_endian=elf.little_endian,
                       machine=h["e_machine"] if isinstance(h["e_machine"], str)
                       else f"EM_{h['e_machine']}",
                       type=h["e_type"], flags=h["e_flags"],
                       osabi=h["e_ident"]["EI_OSABI"], abiversion=h["e_ident"]["EI_ABIVERSION"],
                       functions=frozenset(funcs), objects=frozenset(objs), sections=sections)
    except (ELFError, Exception) as exc:     # pyelftools raises many kinds on bad input
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"malformed ELF image: {type(exc).__name__}: {exc}") from None


@dataclass
class Binary:
    """One target's code: an ELF file (host .so, cubin, AMDGPU code object) or PTX."""

    data: bytes
    format: str                          # 'elf' or 'ptx'
    elf: ElfInfo | None
    prototypes: dict[str, str]           # kernel name -> C declaration (host kernels)
    digest: str
    path: str | None = None           # the file it was read from, if any
    #: format 'function': kernel name -> address of a function compiled in this process
    functions: dict[str, int] = field(default_factory=dict)
    #: what keeps those functions' code alive (a compiled Python kernel)
    owner: Any = None
    #: a kernel launched as several in a row on one queue: name -> ((entry, geometry),
    #: ...), geometry (teams, threads) fixed for that entry, or None: the launch's
    phases: dict[str, tuple[tuple[str, tuple[int, int] | None], ...]] = \
        field(default_factory=dict)

    @classmethod
    def from_bytes(cls, data: bytes, prototypes: dict[str, str] | None = None,
                   path: str | None = None) -> Binary:
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        if data[:4] == b"\x7fELF":
            info = read_elf(data)
            protos = parse_prototype_table(info.sections.get(PROTO_SECTION, b""))
            protos.update(prototypes or {})
            return cls(data, "elf", info, protos, digest, path)
        head = data[:4096].decode("latin-1")
        if ".version" in head and ".target" in head:
            return cls(data, "ptx", None, dict(prototypes or {}), digest, path)
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"image is neither ELF nor PTX (starts with {data[:8]!r})")

    @property
    def header(self) -> ElfInfo:
        """The ELF header and symbols; INVALID_BINARY for a PTX image."""
        if self.elf is None:
            raise OffloadError(ErrorCode.INVALID_BINARY, f"a {self.format} image has no ELF header")
        return self.elf

    def kernel_names(self) -> list[str]:
        """The kernels this binary defines."""
        if self.format == "function":
            return sorted(self.functions)
        if self.format == "ptx":
            if self.phases:
                return sorted(self.phases)
            return re.findall(r"\.entry\s+([\w$]+)", self.data.decode("latin-1"))
        elf = self.header
        if elf.machine == "EM_AMDGPU":
            return sorted(n[:-3] for n in elf.objects if n.endswith(".kd"))
        if elf.machine == "EM_CUDA":
            return sorted(elf.functions)
        return sorted(self.prototypes) or sorted(elf.functions)

    def describe(self) -> str:
        if self.format == "function":
            return "in-process host functions"
        return self.elf.describe() if self.elf else "PTX"


class Kernel:
    """A kernel name in an image; `offload.target(kernel, ...)` runs it."""

    __slots__ = ("image", "name")

    def __init__(self, image: Image, name: str):
        self.image = image
        self.name = name

    def __repr__(self) -> str:
        return f"<Kernel {self.name} of {self.image!r}>"


class Image:
    """Binaries for one or more targets; kernels are attributes."""

    def __init__(self, binaries: list[Binary]):
        if not binaries:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, "an image needs at least one binary")
        self.binaries = list(binaries)
        self._kernels: dict[str, Kernel] = {}

    @classmethod
    def combine(cls, *images: Image) -> Image:
        """One image holding every binary of `images`: one per target."""
        return cls([b for im in images for b in im.binaries])

    @property
    def kernels(self) -> list[str]:
        names: list[str] = []
        for b in self.binaries:
            names += [n for n in b.kernel_names() if n not in names]
        return names

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        k = self._kernels.get(name)
        if k is None:
            if name not in self.kernels:
                raise OffloadError(ErrorCode.NOT_FOUND,
                                   f"kernel '{name}' not found in image "
                                   f"(kernels: {', '.join(self.kernels) or 'none'})")
            k = self._kernels[name] = Kernel(self, name)
        self.__dict__[name] = k          # found without __getattr__ from now on
        return k

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.kernels})

    def __repr__(self) -> str:
        return (f"<Image {' + '.join(b.describe() for b in self.binaries)}: "
                f"{', '.join(self.kernels) or 'no kernels'}>")


def load_image(source: str | os.PathLike | bytes | bytearray | memoryview,
               prototypes: None | str | dict[str, str] = None) -> Image:
    """An Image from a file path or bytes (ELF or PTX).

    `prototypes` (C declarations, or a dict name -> declaration) types host
    kernels of a shared object that was not made by compile_c.
    """
    if isinstance(prototypes, str):
        prototypes = c_prototypes(prototypes)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Image([Binary.from_bytes(bytes(source), prototypes)])
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise OffloadError(ErrorCode.NOT_FOUND, f"cannot read image {path!r}: {exc}") from None
    return Image([Binary.from_bytes(data, prototypes, path=os.path.abspath(path))])


# ---- C prototypes ---------------------------------------------------------
_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')


def c_prototypes(source: str) -> dict[str, str]:
    """Declarations of the externally visible functions defined or declared in C source."""
    text = _STRINGS.sub('""', _COMMENTS.sub(" ", source))
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    out: dict[str, str] = {}
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                _add_prototype(out, text[start:i])
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif ch == ";" and depth == 0:
            head = text[start:i]
            if "(" in head and "=" not in head:
                _add_prototype(out, head)
            start = i + 1
    return out


def _add_prototype(out: dict[str, str], head: str) -> None:
    head = " ".join(head.split())
    if not head.endswith(")") or "(" not in head:
        return
    words = head.split("(")[0].split()
    if not words or words[0] in ("static", "typedef", "inline") or "static" in words:
        return
    m = re.search(r"([A-Za-z_]\w*)\s*\($", head.split("(")[0] + "(")
    if m:
        out[m.group(1)] = head.replace("extern ", "") + ";"


def format_prototype_table(protos: dict[str, str]) -> str:
    return "".join(f"{k}\t{v}\n" for k, v in protos.items())


def parse_prototype_table(raw: bytes) -> dict[str, str]:
    text = raw.rstrip(b"\0").decode("utf-8", "replace")
    out = {}
    for line in text.splitlines():
        if "\t" in line:
            name, decl = line.split("\t", 1)
            out[name] = decl
    return out
