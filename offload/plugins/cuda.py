"""CUDA plugin hooks, following LLVM's CUDA plugin (plugins-nextgen/cuda/src/rtl.cpp):
primary contexts made current on every driver entry (other libraries change the current
context behind us), blocking-sync scheduling and waits that poll so Ctrl-C reaches them,
streams as queues, cuMemHostRegister pinning (chunked, writable when it can be), peer
access for device-to-device copies, a context that died with a kernel fault failing every
later call at once. This module holds CUDAPlugin (driver start, devices, pinning); the
device is in cuda_device.py, its kernels and images in cuda_kernels.py. Bindings are in
_cuda_driver.py, NVRTC in nvrtc.py; semantics (counts, splits, path choice) stay in
common.py."""
from __future__ import annotations

import os
from typing import Any

from ..config import Config
from ..dlpack import register_stream_waiter, unregister_stream_waiter
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..targets import cubin_sm
from . import _cuda_driver as C
from ._cuda_driver import Driver, ffi
from ._cuda_driver import ptr as _ptr
from ._cuda_fast import Fast, fast_calls
from ._cuda_memory import register, registration, unregister
from .common import GenericPlugin
from .cuda_device import CUDADevice
from .cuda_kernels import _ffi, _poll

__all__ = ["CUDADevice", "CUDAPlugin", "_ffi"]

_INIT_PID: list[int] = []           # the process that initialised CUDA (fork detection)
REGISTER_CHUNK = 64 << 30           # cuMemHostRegister at most this much at once (r580+)


class CUDAPlugin(GenericPlugin[CUDADevice]):
    name = "cuda"
    priority = 10
    omp_image_kind = "nvptx"
    device_class = CUDADevice
    asynchronous = True
    device_pool_bytes = 1 << 30     # reuse freed device memory (up to 1 GiB)
    # unpinned pieces of 4 MiB and up are staged, 4 MiB at a time, by up to 16 workers with
    # two buffers each (chosen with bench/staging.py on an H200: see bench/RESULTS.md)
    staging_threshold = 4 << 20
    staging_chunk = 4 << 20
    staging_lanes = 32
    # the primary context waits by blocking sync (as LLVM's plugin sets it), so the
    # driver's copy into pageable memory sleeps until the device interrupts: 48 us for 8
    # bytes, 7 us polled from a staging buffer (H100, BabelStream's Dot)
    stage_small_retrieves = True
    # registrations are made in chunks of this size on an absolute grid (one registration
    # of 512 GiB or more fails on r580+ drivers), and no copy may span two of them
    pin_split = REGISTER_CHUNK

    drv: Driver            # set by _init_impl, before any device exists
    #: synchronous copies and launches in one call (None: no C compiler for the helper)
    fast: Fast | None = None

    def __init__(self, config: Config):
        super().__init__(config)
        self._read_only: set[int] = set()            # hosts registered READ_ONLY

    def _init_impl(self) -> int:
        try:
            self.drv = Driver(self.config.cuda_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.cuda_library} not loadable ({exc})") from None
        rc = self.drv.lib.cuInit(0)
        if rc == C.CUDA_ERROR_NO_DEVICE:
            raise OffloadError(ErrorCode.NOT_FOUND, f"cuInit: {self.drv.text(rc)}")
        if rc == C.CUDA_ERROR_NOT_INITIALIZED and _INIT_PID and _INIT_PID[0] != os.getpid():
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"CUDA was initialised before fork() (in process {_INIT_PID[0]})"
                               f" and cannot be used in this child: start workers with "
                               f"multiprocessing's 'spawn' or 'forkserver' method")
        self.drv.check(rc, "cuInit")
        if not _INIT_PID:
            _INIT_PID.append(os.getpid())
        register_stream_waiter(self.wait_foreign_stream)
        n = _ffi.new("int *")
        self.drv.check(self.drv.lib.cuDeviceGetCount(n), "cuDeviceGetCount")
        if n[0] == 0:
            self.reason = "the driver reports no CUDA device"
        elif self.config.cuda_fast:
            self.fast = fast_calls(_ffi, self.drv.lib)
        return n[0]

    def check_binary(self, binary: Binary, dev: CUDADevice | None = None) -> None:
        """Raise INVALID_BINARY unless `binary` is a cubin for dev's SM, or PTX."""
        if binary.format == "ptx":
            return
        e = binary.header
        if e.machine != "EM_CUDA":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"image is {e.describe()}, not a CUDA cubin (EM_CUDA)")
        sm = cubin_sm(e.flags, e.abiversion)
        if dev is not None and not (sm // 10 == dev.sm[0] and sm % 10 <= dev.sm[1]):
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"cubin is for sm_{sm} (ELF ABI version {e.abiversion}), device "
                               f"{dev.id} is sm_{dev.sm[0]}{dev.sm[1]}")

    def architecture(self, d: int = 0) -> str | None:
        """'sm_XY' of device d, or None when this plugin has no such device."""
        if d >= self.number_of_devices():
            return None
        sm = self.device(d).sm
        return f"sm_{sm[0]}{sm[1]}"

    def _host_alloc_address(self, d: int, addr: int) -> int:
        return self._device_pointer(d, addr)

    def _device_pointer(self, d: int, host: int) -> int:
        self.device(d).activate()
        out = _ffi.new("CUdeviceptr *")
        self.drv.check(self.drv.lib.cuMemHostGetDevicePointer_v2(out, _ptr(host), 0),
                       "cuMemHostGetDevicePointer")
        return int(out[0])

    # ---- pinning hooks ----------------------------------------------------
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        if first:
            self.device(device).activate()
            if register(self.drv, host, size, read_only, self.pin_split):
                self._read_only.add(host)
        try:
            return self._device_pointer(device, host)
        except BaseException:            # registered, but unusable: take it back
            if first:
                self._read_only.discard(host)
                unregister(self.drv, host, size, self.pin_split)
            raise

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last:
            self.device(device).activate()
            self._read_only.discard(host)
            unregister(self.drv, host, size, self.pin_split)

    def pin_is_read_only(self, host: int) -> bool:
        return host in self._read_only

    def _deinit_impl(self) -> None:
        unregister_stream_waiter(self.wait_foreign_stream)

    def poll_stream(self, stream: Any) -> int:
        """The common wait (waits.poll) of a stream, spinning in the helper where built."""
        fast = self.fast
        return _poll(self.drv.lib.cuStreamQuery, stream,
                     fast.spin_stream if fast is not None else None)

    def poll_event(self, event: Any) -> int:
        """The common wait of an event, spinning in the helper where built."""
        fast = self.fast
        return _poll(self.drv.lib.cuEventQuery, event,
                     fast.spin_event if fast is not None else None)

    def wait_foreign_stream(self, stream: int) -> None:
        """Wait for the work queued so far on a foreign CUDA stream (a raw CUstream; 1 and
        2 name the legacy and per-thread default streams of the current context): an
        event recorded on it, polled so Ctrl-C is delivered. No device-wide synchronize."""
        if not self.initialized_devices():
            return          # a plugin with no device in use has no stream of ours to order
        drv = self.drv
        drv.alive()
        handle = ffi.cast("CUstream", 0 if stream == 1 else stream)
        if drv.lib.cuStreamQuery(handle) == C.CUDA_SUCCESS:
            return                              # idle: nothing queued to wait for
        if stream not in (1, 2):                # the stream's own context, not ours
            ctx = ffi.new("CUcontext *")
            drv.check(drv.lib.cuStreamGetCtx(handle, ctx), f"cuStreamGetCtx(0x{stream:x})")
            drv.check(drv.lib.cuCtxSetCurrent(ctx[0]), "cuCtxSetCurrent")
        ev = ffi.new("CUevent *")
        drv.check(drv.lib.cuEventCreate(ev, C.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            drv.check(drv.lib.cuEventRecord(ev[0], handle), f"cuEventRecord(0x{stream:x})")
            drv.check(self.poll_event(ev[0]), "cuEventQuery")
        finally:
            drv.lib.cuEventDestroy_v2(ev[0])

    def _is_pinned_impl(self, host: int, size: int) -> tuple[int, int, int] | None:
        """Memory registered by someone else (CuPy, PyTorch): (base, size, device address).
        A range only partly inside such a registration is refused (INVALID_ARGUMENT):
        recording it as pinned would send every copy down a path the driver refuses."""
        devs = self.initialized_devices()
        if not devs:
            return None
        devs[0].activate()
        found = registration(self.drv, host)
        if found is None:
            return None     # a foreign registration further in: cuMemHostRegister says 712
        base, n = found
        if host + size > base + n:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"0x{host:x} ({size} bytes) is partly registered by another "
                               f"library (0x{base:x}, {n} bytes): lock within that range")
        return base, n, self._device_pointer(devs[0].id, base)
