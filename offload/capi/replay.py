"""`python -m offload.capi.replay KERNEL.json [--verify] [--device N]`: replay a kernel
recorded by offload's libomptarget.so.19.1 (or LLVM's), as LLVM 19's llvm-omp-kernel-replay
does, through the same exports: the recorded image registered with one entry for the
kernel, record/replay started in replay mode at the recorded block, the recorded memory
and arguments given to __tgt_target_kernel_replay; with --verify the memory after it is
compared with `<kernel>.original.output`. For machines without LLVM's tool (it needs
libLLVM); the device is the recording one by its plugin's kind and number unless given."""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import cffi

from .. import runtime
from .abi import SONAME, TYPES
from .build import libdir
from .images import image_kind

_EXPORTS = """
void __tgt_register_lib(__tgt_bin_desc *desc);
void __tgt_unregister_lib(__tgt_bin_desc *desc);
int __tgt_activate_record_replay(int64_t dev, uint64_t size, void *vaddr, bool record,
                                 bool save_output, uint64_t *offset);
int __tgt_target_kernel_replay(void *loc, int64_t dev, void *host_ptr, void *memory,
                               int64_t size, void **args, ptrdiff_t *offsets, int32_t n,
                               int32_t teams, int32_t threads, uint64_t tripcount);
"""


def _device_for(kind: str | None, local_id: int) -> int:
    """The global device number of the `local_id`-th device running `kind` images."""
    rt = runtime.current()
    for n in range(rt.num_devices()):
        d = rt.manager.get_device(n)
        if d.plugin.omp_image_kind == kind and d.local_id == local_id:
            return n
    raise SystemExit(f"no device {local_id} for {kind or 'this'} image")


class BadRecording(Exception):
    """A recording that cannot be replayed: the message names the file, field and value."""


# field -> (lowest, highest) of the integers a description holds
_INTS = {"NumArgs": (0, 1 << 16), "NumTeamsClause": (0, 2**31 - 1),
         "ThreadLimitClause": (0, 2**31 - 1), "LoopTripCount": (0, 2**64 - 1),
         "DeviceMemorySize": (0, 2**63 - 1), "DeviceId": (0, 2**31 - 1),
         "BumpAllocVAStart": (0, 2**64 - 1)}


def description(path: str) -> dict:
    """The launch `path` describes, every field checked (LLVM 19's names): a JSON object
    whose Name is a kernel name, integers in range, and ArgPtrs / ArgOffsets lists of
    NumArgs integers. BadRecording otherwise."""
    try:
        with open(path) as f:
            desc = json.load(f)
    except json.JSONDecodeError as exc:
        raise BadRecording(f"{path}: not JSON ({exc})") from None
    except OSError as exc:
        raise BadRecording(f"{path}: {exc.strerror}") from None
    if not isinstance(desc, dict):
        raise BadRecording(f"{path}: expected a JSON object, got {type(desc).__name__}")
    missing = [k for k in ("Name", "ArgPtrs", "ArgOffsets", *_INTS) if k not in desc]
    if missing:
        raise BadRecording(f"{path}: missing {', '.join(missing)}")
    name = desc["Name"]
    if not isinstance(name, str) or not name or "/" in name or name.startswith(".") \
            or "\0" in name:
        raise BadRecording(f"{path}: Name={name!r} is not a kernel name")
    for key, (lo, hi) in _INTS.items():
        v = desc[key]
        if type(v) is not int or not lo <= v <= hi:
            raise BadRecording(f"{path}: {key}={v!r} is not an integer in [{lo}, {hi}]")
    n = desc["NumArgs"]
    for key, lo, hi in (("ArgPtrs", -(2**63), 2**64 - 1), ("ArgOffsets", -(2**63), 2**63 - 1)):
        v = desc[key]
        if not isinstance(v, list) or len(v) != n or \
                any(type(x) is not int or not lo <= x <= hi for x in v):
            raise BadRecording(f"{path}: {key} must be a list of NumArgs={n} integers in "
                               f"[{lo}, {hi}], got {str(v)[:80]}")
    return desc


def replay(path: str, verify: bool = False, device: int | None = None) -> bool | None:
    """Replay the kernel `path` describes; with `verify`, whether its memory after the
    replay equals the recorded run's (None without it). BadRecording for a description
    or file that cannot be replayed."""
    desc = description(path)
    where = os.path.dirname(os.path.abspath(path))
    name = desc["Name"]
    stem = os.path.join(where, name)
    try:
        with open(stem + ".image", "rb") as f:
            image = f.read()
        with open(stem + ".memory", "rb") as f:
            memory = f.read()
    except OSError as exc:
        raise BadRecording(f"{exc.filename}: {exc.strerror}") from None
    if len(memory) < desc["DeviceMemorySize"]:
        raise BadRecording(f"{stem}.memory holds {len(memory)} bytes, fewer than "
                           f"DeviceMemorySize={desc['DeviceMemorySize']}")
    ffi = cffi.FFI()
    ffi.cdef(TYPES + _EXPORTS)
    ctypes.CDLL(os.path.join(libdir(), SONAME), mode=ctypes.RTLD_GLOBAL)
    lib = ffi.dlopen(os.path.join(libdir(), SONAME))
    img = ffi.from_buffer(image)
    c_name = ffi.new("char[]", name.encode())
    entry = ffi.new("__tgt_offload_entry *", {"addr": ffi.cast("void *", 1), "name": c_name})
    dimg = ffi.new("__tgt_device_image *", {"ImageStart": img, "ImageEnd": img + len(image),
                                            "EntriesBegin": entry, "EntriesEnd": entry + 1})
    bin_desc = ffi.new("__tgt_bin_desc *", {"NumDeviceImages": 1, "DeviceImages": dimg,
                                            "HostEntriesBegin": entry,
                                            "HostEntriesEnd": entry + 1})
    lib.__tgt_register_lib(bin_desc)
    here = os.getcwd()
    os.chdir(where)                    # the replay's output goes beside the recording
    try:
        dev = device if device is not None else _device_for(image_kind(image),
                                                             desc["DeviceId"])
        start, size = desc["BumpAllocVAStart"], desc["DeviceMemorySize"]
        offset = ffi.new("uint64_t *")
        if lib.__tgt_activate_record_replay(dev, max(size, 1), ffi.cast("void *", start),
                                            False, verify, offset) != 0:
            raise SystemExit("cannot start replaying")
        args = [a & (2**64 - 1) for a in desc["ArgPtrs"]]
        if offset[0]:                  # the block lies elsewhere: move pointers into it
            args = [a - offset[0] if start <= a < start + size else a for a in args]
        n = desc["NumArgs"]
        c_args = ffi.new("void *[]", [ffi.cast("void *", a) for a in args] or [ffi.NULL])
        c_offsets = ffi.new("ptrdiff_t[]", desc["ArgOffsets"] or [0])
        buf = ffi.from_buffer(bytearray(memory))
        rc = lib.__tgt_target_kernel_replay(ffi.NULL, dev, ffi.cast("void *", 1), buf,
                                            len(memory), c_args, c_offsets, n,
                                            desc["NumTeamsClause"], desc["ThreadLimitClause"],
                                            desc["LoopTripCount"])
        if rc != 0:
            raise SystemExit(f"the replay failed ({rc})")
    finally:
        os.chdir(here)
        lib.__tgt_unregister_lib(bin_desc)
    if not verify:
        return None
    with open(stem + ".original.output", "rb") as a, open(stem + ".replay.output", "rb") as b:
        return a.read() == b.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m offload.capi.replay",
        description="replay a recorded OpenMP kernel on offload's runtime")
    parser.add_argument("kernel", help="the kernel's .json description")
    parser.add_argument("--verify", action="store_true",
                        help="compare the memory after the replay with the recorded output")
    parser.add_argument("--device", type=int, help="the device number (default: recorded)")
    a = parser.parse_args(argv)
    try:
        ok = replay(a.kernel, a.verify, a.device)
    except BadRecording as exc:
        print(f"python -m offload.capi.replay: error: {exc}", file=sys.stderr)
        return 2
    if ok is not None:
        print("replay device memory " + ("verified" if ok else "failed to verify"))
    return 0 if ok is not False else 1


if __name__ == "__main__":
    sys.exit(main())
