"""What an image is for: the target named in a cubin's or AMDGPU code object's ELF
header and notes (beside image.py, which reads the ELF itself)."""
from __future__ import annotations

import io
import struct
from typing import Any

from .errors import ErrorCode, OffloadError
from .plugins.args import Param, scalar_kind


def cubin_sm(flags: int, abiversion: int) -> int:
    """The SM number in a cubin's e_flags: bits 8-15 from ELF ABI version 8 (CUDA 13), else 0-7."""
    return (flags >> 8) & 0xFF if abiversion >= 8 else flags & 0xFF


# ELF e_flags of AMDGPU code objects (amd_hsa_elf.h), code object v4 and later
EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
FEATURE_SETTINGS = {"xnack": {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"},
                    "sramecc": {0x000: "unsupported", 0x400: "any", 0x800: "off",
                                0xC00: "on"}}
MACHINES = {  # EF_AMDGPU_MACH_AMDGCN_* -> processor
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702",
    0x025: "gfx703", 0x026: "gfx704", 0x028: "gfx801", 0x029: "gfx802", 0x02A: "gfx803",
    0x02B: "gfx810", 0x02C: "gfx900", 0x02D: "gfx902", 0x02E: "gfx904", 0x02F: "gfx906",
    0x030: "gfx908", 0x031: "gfx909", 0x032: "gfx90c", 0x033: "gfx1010", 0x034: "gfx1011",
    0x035: "gfx1012", 0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032",
    0x039: "gfx1033", 0x03A: "gfx602", 0x03B: "gfx705", 0x03C: "gfx805", 0x03D: "gfx1035",
    0x03E: "gfx1034", 0x03F: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x042: "gfx1013",
    0x043: "gfx1150", 0x044: "gfx1103", 0x045: "gfx1036", 0x046: "gfx1101",
    0x047: "gfx1102", 0x048: "gfx1200", 0x04A: "gfx1151", 0x04B: "gfx941", 0x04C: "gfx942",
    0x04E: "gfx1201", 0x055: "gfx1152",
}  # checked against ROCm 5.2.3's amd_hsa_elf.h and against clang-19's output (tests)
NT_AMDGPU_METADATA = 32

def target_features(isa_name: str) -> tuple[str, dict[str, str]]:
    """('gfx90a', {'sramecc': 'on', 'xnack': 'off'}) from an ISA name or target ID."""
    tail = isa_name.rsplit("--", 1)[-1]
    proc, *feats = tail.split(":")
    settings = {}
    for f in feats:
        if f and f[-1] in "+-":
            settings[f[:-1]] = "on" if f[-1] == "+" else "off"
    return proc, settings


def code_object_target(flags: int) -> tuple[str, dict[str, str]]:
    """The processor and xnack/sramecc settings in an AMDGPU code object's e_flags."""
    proc = MACHINES.get(flags & EF_AMDGPU_MACH, f"unknown EF_AMDGPU_MACH 0x{flags & 0xFF:x}")
    return proc, {"xnack": FEATURE_SETTINGS["xnack"][flags & EF_AMDGPU_FEATURE_XNACK_V4],
                  "sramecc": FEATURE_SETTINGS["sramecc"][flags & EF_AMDGPU_FEATURE_SRAMECC_V4]}


def read_metadata(data: bytes) -> Any:
    """The msgpack NT_AMDGPU_METADATA note of a code object, decoded (INVALID_BINARY when
    missing or malformed)."""
    import msgpack
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(data))
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_NOTE":
                continue
            notes = sec.data()
            off = 0
            while off + 12 <= len(notes):
                namesz, descsz, ntype = struct.unpack_from("<III", notes, off)
                name = notes[off + 12:off + 12 + namesz].rstrip(b"\0")
                desc_off = off + 12 + ((namesz + 3) & ~3)
                desc = notes[desc_off:desc_off + descsz]
                off = desc_off + ((descsz + 3) & ~3)
                if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                    return msgpack.unpackb(desc, raw=False, strict_map_key=False)
    except Exception as exc:        # noqa: BLE001 - pyelftools and msgpack raise many kinds
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"malformed AMDGPU code object metadata: {type(exc).__name__}: "
                           f"{exc}") from None
    raise OffloadError(ErrorCode.INVALID_BINARY,
                       "AMDGPU code object has no NT_AMDGPU_METADATA note")


_ARG_FIELDS = {".offset": int, ".size": int, ".value_kind": str}


def kernel_metadata(data: bytes) -> dict[str, dict]:
    """Kernel name -> its metadata map (with `.args` checked: a list of maps with integer
    `.offset`/`.size` and a string `.value_kind`), from a code object's metadata note."""
    meta = read_metadata(data)

    def bad(what: str) -> OffloadError:
        return OffloadError(ErrorCode.INVALID_BINARY, f"malformed AMDGPU metadata: {what}")

    if not isinstance(meta, dict):
        raise bad(f"the note holds {type(meta).__name__}, not a map")
    kernels = meta.get("amdhsa.kernels", [])
    if not isinstance(kernels, list):
        raise bad("amdhsa.kernels is not a list")
    out: dict[str, dict] = {}
    for k in kernels:
        if not isinstance(k, dict) or not isinstance(k.get(".name"), str):
            raise bad("a kernel entry without a .name string")
        args = k.get(".args", [])
        if not isinstance(args, list):
            raise bad(f"kernel {k['.name']!r}: .args is not a list")
        for i, a in enumerate(args):
            if not isinstance(a, dict):
                raise bad(f"kernel {k['.name']!r}: argument {i} is not a map")
            for field, kind in _ARG_FIELDS.items():
                if not isinstance(a.get(field), kind) or isinstance(a.get(field), bool):
                    raise bad(f"kernel {k['.name']!r}: argument {i} has no {kind.__name__} "
                              f"{field}")
            if a[".offset"] < 0 or not 0 < a[".size"] <= 4096:
                raise bad(f"kernel {k['.name']!r}: argument {i} has offset {a['.offset']} "
                          f"and size {a['.size']}")
        seg = k.get(".kernarg_segment_size", 0)
        if not isinstance(seg, int) or not 0 <= seg <= 1 << 20:
            raise bad(f"kernel {k['.name']!r}: .kernarg_segment_size {seg!r}")
        out[k[".name"]] = k
    return out


def metadata_param(meta: dict) -> Param:
    """A Param from a code object's kernarg metadata (.value_kind, .size, .type_name)."""
    kind, size = meta.get(".value_kind", ""), int(meta.get(".size", 0))
    type_name = str(meta.get(".type_name", "")).strip()
    if kind in ("global_buffer", "dynamic_shared_pointer"):
        if type_name.endswith("*"):
            base = type_name[:-1].replace("__global", "").strip()
            return Param(type_name, True, scalar_kind(base) if base != "void" else "void",
                         _C_SIZES.get(base, 0))
        return Param(type_name or kind, True, None)
    if kind == "by_value":
        if type_name in _C_SIZES:
            return Param(type_name, False, scalar_kind(type_name), size)
        return Param(type_name or f"{size}-byte value", False, None, size)
    return Param(type_name or kind, False, None, size)


_C_SIZES = {"char": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2,
            "int": 4, "unsigned int": 4, "long": 8, "unsigned long": 8, "long long": 8,
            "unsigned long long": 8, "float": 4, "double": 8, "_Float16": 2, "bool": 1,
            "_Bool": 1, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4,
            "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "size_t": 8}


def check_code_object(binary: Any, device: tuple[int, str, dict, str] | None) -> None:
    """INVALID_BINARY naming the mismatch unless `binary` is an AMDGPU code object for
    `device` = (number, processor, xnack/sramecc settings, ISA name); None: any GPU."""
    if binary.format != "elf" or binary.header.machine != "EM_AMDGPU":
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"image is {binary.describe()}, not an AMDGPU code object")
    e = binary.header
    if e.type != "ET_DYN":
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"AMDGPU code object must be ET_DYN (a linked shared object), "
                           f"not {e.type}")
    if device is None:
        return
    number, processor, features, isa = device
    proc, feats = code_object_target(e.flags)
    if proc != processor:
        raise OffloadError(ErrorCode.INVALID_BINARY,
                           f"code object is for {proc}, device {number} is {processor} ({isa})")
    for feat, setting in feats.items():
        want = features.get(feat)
        if setting in ("on", "off") and want is not None and want != setting:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"code object has {feat} {setting}, device {number} runs with "
                               f"{feat} {want} ({isa})")
