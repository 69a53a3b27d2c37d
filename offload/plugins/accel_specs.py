"""What a device hands the compiled mapping core (offload/accel_c) so that it can copy or
launch in C: typed records whose fields C reads by position (they are tuples), named here
once for the Python side. A device gives them through GenericDevice.accel_copier and
accel_launch; None keeps the Python path."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class LaunchSpec(NamedTuple):
    """A kernel launch with one geometry, as the core makes it (accel_c/present.c): launch,
    then spin on one of the copier's streams."""

    function: int                   # the driver's function handle, as an address
    grid: int
    block: int
    shared_mem: int                 # bytes of dynamic shared memory
    sizes: tuple[int, ...]          # each parameter's size in bytes, in order
    name: str                       # the kernel's name
    what: str                       # the launch as an error names it


class ReductionScratch(NamedTuple):
    """What a launch of a clang OpenMP kernel that reduces needs on the device, one of
    each per stream of the device's copier (a stream runs one launch at a time): a launch
    environment {ReductionCnt, ReductionIterCnt, ReductionBuffer} pointing at its buffer;
    the core sets the counters to 0 on the stream before the launch (the buffer, as
    LLVM 19 leaves it, needs no setting). With `section` bytes of device memory right
    after each environment, a region's small section mapped nowhere goes there, sent with
    the counters in one copy (accel_c/section.c)."""

    environments: tuple[int, ...]
    buffers: tuple[int, ...]
    bytes: int                      # of each buffer
    section: int = 0                # bytes after each environment's 16 (0: none)


class OmpLaunchPlan(NamedTuple):
    """How the core launches a clang OpenMP kernel with one geometry in C (the C ABI's
    regions on mapped data): `spec`, with `first` (its launch environment) before the
    region's own arguments; for a kernel that reduces, the environment of the stream the
    launch takes from `scratch` instead."""

    spec: LaunchSpec
    first: int
    scratch: ReductionScratch | None = None


class MemcpyCopier(NamedTuple):
    """Device memory that is host memory: a copy is a memmove (the host plugin)."""

    how: str = "memcpy"


class CudaCopier(NamedTuple):
    """A pinned copy in one C call on a CUDA device (accel_c/update.c): make the context
    current, enqueue on a stream of our own, spin; poll on through `poll` when it
    outlasts the spin, errors raised by `check`."""

    how: str                        # "cuda"
    set_ctx: int                    # cuCtxSetCurrent
    context: int
    h2d: int                        # cuMemcpyHtoDAsync_v2
    d2h: int                        # cuMemcpyDtoHAsync_v2
    query: int                      # cuStreamQuery
    spin: float                     # seconds the C spin lasts (waits.SPIN_SECONDS)
    stream_addresses: tuple[int, ...]
    streams: tuple[Any, ...]        # the same streams as the driver's cdata
    poll: Callable[[Any], int]      # the common wait of one of them
    check: Callable[[int, str], None]
    driver: Any                     # whose `dead` flag stops the C path
    device: int
    pin_split: int                  # bytes above which a pinned copy is split (0: never)
    launch: int                     # cuLaunchKernel
    memset: int                     # cuMemsetD8Async
    #: each stream's pinned bounce buffer for a region's small section, asked for at
    #: first use (GenericDevice.copier_bounce); None: sections are mapped in Python
    bounce: Callable[[], tuple[tuple[int, ...], int]] | None = None


Copier = MemcpyCopier | CudaCopier

#: streams a CudaCopier brings (each a launch's or a copy's at a time)
COPIER_STREAMS = 2

#: bytes of a copier stream's bounce buffer: the largest section a region maps in C
BOUNCE_BYTES = 4096

#: launch specs kept per kernel (one per geometry it was launched with) at most
SPECS_KEPT = 64
