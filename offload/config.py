"""Every environment variable offload reads, read in this one place."""
from __future__ import annotations

import enum
import os
import sys
from dataclasses import dataclass
from typing import TypeVar

from .cache_dir import default_root
from .errors import ErrorCode, OffloadError


class TargetOffload(enum.Enum):
    DEFAULT = "default"
    MANDATORY = "mandatory"
    DISABLED = "disabled"


class LockMapped(enum.Enum):
    OFF = "off"
    ON = "on"
    MANDATORY = "mandatory"


class Info(enum.IntFlag):
    """LIBOMPTARGET_INFO bits, LLVM's values."""

    KERNEL_ARGS = 0x1
    MAPPING_EXISTS = 0x2
    DUMP_TABLE = 0x4
    MAPPING_CHANGED = 0x8
    PLUGIN_KERNEL = 0x10
    DATA_TRANSFER = 0x20
    EMPTY_MAPPING = 0x40


# name -> one-line description; the README's table is made from this.
VARIABLES = {
    "OMP_TARGET_OFFLOAD": "mandatory | disabled | default",
    "OMP_DEFAULT_DEVICE": "initial default device number (default 0)",
    "LIBOMPTARGET_INFO": "bit mask of Info: maps, transfers, kernel launches, table dumps",
    "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS": "off | on | mandatory: pin host buffers when mapped",
    "OFFLOAD_PLUGINS": "comma list restricting and ordering plugins (e.g. host,cuda)",
    "OFFLOAD_HOST_NUM_DEVICES": "number of host-plugin devices (default 1)",
    "OFFLOAD_CACHE_DIR": "where compile_c, compile_openmp and the drop-in libomptarget keep what "
                         "they build (default ~/.cache/offload)",
    "OFFLOAD_CC": "C compiler used by compile_c (default $CC, else cc)",
    "OFFLOAD_CUDA_LIBRARY": "path of libcuda (default libcuda.so.1)",
    "OFFLOAD_CUDA_NVRTC_LIBRARY": "path of libnvrtc (default: searched)",
    "OFFLOAD_AMDGPU_HSA_LIBRARY": "path of libhsa-runtime64 (default libhsa-runtime64.so.1)",
    "OFFLOAD_CAPI_INJECT": "comma list of the drop-in libomptarget's exports made to fail "
                           "(tests)",
    "OFFLOAD_CAPI_PROFILE": "path: a C program on the drop-in libomptarget writes a cProfile "
                            "of its calls into offload there when it exits",
    "LIBOMPTARGET_RECORD": "1: a C program on the drop-in libomptarget records every kernel "
                           "launch (LLVM's files, in the current directory)",
    "LIBOMPTARGET_RR_DEVMEM_SIZE": "GiB reserved per device for recording (default 64)",
    "LIBOMPTARGET_RR_SAVE_OUTPUT": "1: recording also writes the memory after each kernel",
    "LIBOMPTARGET_PROFILE": "path: write a Chrome trace of copies and kernels there (LLVM's "
                            "events, and one lane per device queue)",
    "LIBOMPTARGET_PROFILE_GRANULARITY": "microseconds: LLVM's events shorter than this are "
                                        "left out of the profile (default 500; totals and "
                                        "device lanes are kept)",
    "OFFLOAD_STATS": "path: when the runtime shuts down (a program's exit included), write "
                     "offload.stats() of every device it used there as JSON (offload-info "
                     "--stats PATH prints it)",
    "OMP_NUM_TEAMS": "GPU plugins: the most teams a kernel launches (caps LLVM's block limit)",
    "OMP_TEAMS_THREAD_LIMIT": "GPU plugins: the most threads a team has",
    "LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT": "GPU plugins: the fewest threads per team a "
                                                   "combined loop with few iterations keeps "
                                                   "(default 32)",
    "LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT": "GPU plugins: true (default) | false: a "
                                                     "combined loop launches at most the default "
                                                     "team count, teams taking several "
                                                     "iterations",
}


E = TypeVar("E", bound=enum.Enum)

#: in a C program on the drop-in library, the variables LLVM 19 accepts whatever their
#: value (libomp warns about a bad OMP_* value and uses its default; LLVM ignores a bad
#: LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS) take their default when invalid
LLVM_LENIENT = ("OMP_TARGET_OFFLOAD", "OMP_DEFAULT_DEVICE",
                "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS", "OMP_NUM_TEAMS", "OMP_TEAMS_THREAD_LIMIT",
                "LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT",
                "LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _lenient(name: str) -> bool:
    return name in LLVM_LENIENT and bool(getattr(sys, "_offload_capi_owns_python", False))


def _enum(name: str, kind: type[E], default: E) -> E:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if _lenient(name):
        try:
            return _enum_strict(name, kind, default, raw)
        except OffloadError:
            return default
    return _enum_strict(name, kind, default, raw)


def _enum_strict(name: str, kind: type[E], default: E, raw: str) -> E:
    if kind is LockMapped and raw in _TRUE + _FALSE:
        raw = "on" if raw in _TRUE else "off"
    try:
        return kind(raw)
    except ValueError:
        allowed = " | ".join(m.value for m in kind)
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{name}={raw!r} is not one of {allowed}") from None


def _int(name: str, default: int, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw, 0)
    except ValueError:
        if _lenient(name):
            return default
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{name}={raw!r} is not an integer") from None
    if not minimum <= value <= maximum:
        if _lenient(name):
            return default
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"{name}={value} is out of range [{minimum}, {maximum}]")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    if _lenient(name):
        return default
    raise OffloadError(ErrorCode.INVALID_VALUE, f"{name}={raw!r} is not one of true | false")


@dataclass(frozen=True)
class Config:
    target_offload: TargetOffload = TargetOffload.DEFAULT
    default_device: int = 0
    info: Info = Info(0)
    lock_mapped: LockMapped = LockMapped.OFF
    plugins: tuple[str, ...] | None = None
    host_num_devices: int = 1
    host_async: bool = False
    cache_dir: str = ""
    cc: str = "cc"
    cuda_library: str = "libcuda.so.1"
    cuda_fast: bool = True
    accel: bool = True
    nvrtc_library: str = ""
    hsa_library: str = "libhsa-runtime64.so.1"
    num_teams_cap: int = 0             # OMP_NUM_TEAMS (0: none)
    teams_thread_cap: int = 0          # OMP_TEAMS_THREAD_LIMIT (0: none)
    min_threads_low_trip: int = 32     # LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT
    reuse_blocks: bool = True          # LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT
    profile: str = ""                  # LIBOMPTARGET_PROFILE (path; "": none)
    profile_granularity: int = 500     # LIBOMPTARGET_PROFILE_GRANULARITY (microseconds)
    stats_path: str = ""               # OFFLOAD_STATS (path; "": none)


def accel_enabled() -> bool:
    """OFFLOAD_ACCEL alone, as imports read it (a bad value: off, and read() says why
    when the runtime starts)."""
    try:
        return bool(_int("OFFLOAD_ACCEL", 1, maximum=1))
    except OffloadError:
        return False


def tools() -> tuple[str, str]:
    """(cache directory, C compiler), as read() gives them, reading nothing else."""
    env = os.environ
    return default_root(), env.get("OFFLOAD_CC") or env.get("CC") or "cc"


def read() -> Config:
    """Read the environment now."""
    env = os.environ
    plugins = env.get("OFFLOAD_PLUGINS", "").strip()
    return Config(
        target_offload=_enum("OMP_TARGET_OFFLOAD", TargetOffload, TargetOffload.DEFAULT),
        default_device=_int("OMP_DEFAULT_DEVICE", 0),
        info=Info(_int("LIBOMPTARGET_INFO", 0, minimum=-(2**31)) & 0x7F),  # -1: every bit
        lock_mapped=_enum("LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS", LockMapped, LockMapped.OFF),
        plugins=tuple(p.strip() for p in plugins.split(",") if p.strip()) if plugins else None,
        host_num_devices=_int("OFFLOAD_HOST_NUM_DEVICES", 1, maximum=1024),
        host_async=bool(_int("OFFLOAD_HOST_ASYNC", 0, maximum=1)),
        cache_dir=default_root(),
        cc=env.get("OFFLOAD_CC") or env.get("CC") or "cc",
        cuda_library=env.get("OFFLOAD_CUDA_LIBRARY") or "libcuda.so.1",
        cuda_fast=bool(_int("OFFLOAD_CUDA_FAST", 1, maximum=1)),
        accel=bool(_int("OFFLOAD_ACCEL", 1, maximum=1)),
        nvrtc_library=env.get("OFFLOAD_CUDA_NVRTC_LIBRARY", ""),
        hsa_library=env.get("OFFLOAD_AMDGPU_HSA_LIBRARY") or "libhsa-runtime64.so.1",
        num_teams_cap=_int("OMP_NUM_TEAMS", 0, maximum=2**31 - 1),
        teams_thread_cap=_int("OMP_TEAMS_THREAD_LIMIT", 0, maximum=2**31 - 1),
        min_threads_low_trip=_int("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", 32,
                                  maximum=2**32 - 1),
        reuse_blocks=_bool("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", True),
        profile=env.get("LIBOMPTARGET_PROFILE", "").strip(),
        profile_granularity=_int("LIBOMPTARGET_PROFILE_GRANULARITY", 500),
        stats_path=env.get("OFFLOAD_STATS", "").strip(),
    )
