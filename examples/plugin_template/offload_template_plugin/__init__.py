"""A template offload plugin: a working one, to copy.

Devices are slices of host memory; each queue is a worker thread that runs copies and
kernels in order, so the plugin is really asynchronous (`asynchronous = True`). Images
are ELF shared objects for this CPU, typed from the C prototypes they carry (what
`offload.compile_c` makes). Pinning is mlock.

Every method here is a hook of the plugin table (docs/plugins.md). The common layer
(offload.plugins.common) does the rest: reference counts and overlap rules for pins,
splitting copies at pinned boundaries, the device-memory pool, queue borrowing, the
kernel cache, argument-count checks. A hook raises OffloadError with an ErrorCode on
failure, and never keeps counts of its own.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import queue as _queue
import threading
from collections.abc import Sequence
from typing import Any

import cffi

from offload.config import Config
from offload.errors import ErrorCode, OffloadError
from offload.image import Binary
from offload.plugins.common import AllocKind, GenericDevice, GenericKernel, GenericPlugin

__all__ = ["TemplateDevice", "TemplatePlugin"]

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PAGE = os.sysconf("SC_PAGE_SIZE")
_MACHINE = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}.get(platform.machine(), "?")


class _Worker:
    """A queue: one thread running submitted work in order. Errors are kept and raised
    by the next synchronize, as a driver reports a failed stream."""

    def __init__(self) -> None:
        self.tasks: _queue.Queue = _queue.Queue()
        self.error: BaseException | None = None
        self.idle = threading.Event()
        self.idle.set()
        self.pending = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="offload-template-queue")
        self.thread.start()

    def submit(self, fn: Any, *args: Any) -> None:
        with self.lock:
            self.pending += 1
            self.idle.clear()
        self.tasks.put((fn, args))

    def _run(self) -> None:
        while True:
            item = self.tasks.get()
            if item is None:
                return
            fn, args = item
            try:
                if self.error is None:
                    fn(*args)
            except BaseException as exc:       # noqa: BLE001 - reported at synchronize
                self.error = exc
            with self.lock:
                self.pending -= 1
                if self.pending == 0:
                    self.idle.set()

    def synchronize(self) -> None:
        self.idle.wait()
        error, self.error = self.error, None
        if error is not None:
            if isinstance(error, OffloadError):
                raise error
            raise OffloadError(ErrorCode.BACKEND_FAILURE, f"queued work failed: {error}")

    def stop(self) -> None:
        self.tasks.put(None)


class TemplateDevice(GenericDevice):
    plugin: TemplatePlugin

    # ---- memory ------------------------------------------------------------------
    def _alloc_impl(self, size: int, kind: AllocKind) -> int:
        addr = _libc.malloc(size)
        if not addr:
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                               f"cannot allocate {size} bytes on template device {self.id}")
        return int(addr)

    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None:
        _libc.free(addr)

    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: int | None) -> None:
        # `pinned`: the device-accessible address when the host range is pinned; a real
        # device would DMA from it. Here both paths are a memmove on the queue.
        queue.submit(ctypes.memmove, tgt, host, size)

    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: int | None) -> None:
        queue.submit(ctypes.memmove, host, tgt, size)

    def _exchange_impl(self, src: int, dst_device: GenericDevice, dst: int, size: int,
                       queue: Any) -> bool:
        if not isinstance(dst_device, TemplateDevice):
            return False                    # another plugin: the common layer bounces
        with self.queue(queue) as q:
            q.submit(ctypes.memmove, dst, src, size)
        if queue is not None:
            self._sync_impl(queue)
        return True

    # ---- queues ------------------------------------------------------------------
    def _create_queue_impl(self) -> _Worker:
        return _Worker()

    def _destroy_queue_impl(self, queue: _Worker) -> None:
        queue.stop()

    def _sync_impl(self, queue: _Worker | None) -> None:
        if queue is not None:
            queue.synchronize()

    def _query_impl(self, queue: _Worker) -> bool:
        return queue.idle.is_set()

    def _deinit_impl(self) -> None:
        self.queues.destroy_all()

    # ---- images and kernels --------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        ffi = cffi.FFI()
        for decl in binary.prototypes.values():
            ffi.cdef(decl, override=True)
        fd = os.memfd_create("offload-template-image")     # load exactly these bytes
        os.write(fd, binary.data)
        lib = ffi.dlopen(f"/proc/self/fd/{fd}")
        self.plugin.image_fds.append(fd)                    # kept open while loaded
        return ffi, lib

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        ffi, lib = program
        if name not in binary.prototypes:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' has no C prototype in this image")
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OffloadError(ErrorCode.NOT_FOUND, f"kernel '{name}' not found") from None
        params = list(ffi.typeof(fn).args)
        return GenericKernel(name, (ffi, fn), params, binary.prototypes[name])

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any, shared_mem: int = 0) -> None:
        ffi, fn = kernel.handle
        try:
            conv = [ffi.cast(t, a) if t.kind == "pointer" else a
                    for t, a in zip(kernel.params, args, strict=True)]
        except (TypeError, OverflowError) as exc:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"bad argument for kernel '{kernel.name}': {exc}") from None
        with self.queue(queue) as q:        # no queue: run and wait
            q.submit(fn, *conv)

    # ---- information -----------------------------------------------------------------
    def _info_impl(self) -> dict:
        return {"name": f"template device {self.id} (host memory)", "kind": "template",
                "queues": "one worker thread each"}

    def _is_accessible_impl(self, host: int, size: int) -> bool:
        return True


class TemplatePlugin(GenericPlugin[TemplateDevice]):
    name = "template"
    priority = 90                           # after the GPUs, before the host plugin
    device_class = TemplateDevice
    asynchronous = True                     # copies on a queue finish later

    def __init__(self, config: Config):
        super().__init__(config)
        self.image_fds: list[int] = []

    def _init_impl(self) -> int:
        """The number of devices; raise OffloadError to say why there are none."""
        try:
            n = int(os.environ.get("OFFLOAD_TEMPLATE_NUM_DEVICES", "1"))
        except ValueError:
            raise OffloadError(ErrorCode.INVALID_VALUE,
                               "OFFLOAD_TEMPLATE_NUM_DEVICES is not an integer") from None
        if n <= 0:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               "OFFLOAD_TEMPLATE_NUM_DEVICES asks for no device")
        return n

    def check_binary(self, binary: Binary, dev: TemplateDevice | None = None) -> None:
        """INVALID_BINARY, naming what is wrong, unless this plugin can load `binary`."""
        if binary.format != "elf" or binary.header.machine != _MACHINE \
                or binary.header.type != "ET_DYN":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"the template plugin loads {_MACHINE} shared objects, not "
                               f"{binary.describe()}")

    # ---- pinning: told whether this is the first pin / the last unpin -------------------
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        if first:
            lo, hi = host - host % PAGE, -(-(host + size) // PAGE) * PAGE
            if _libc.mlock(lo, hi - lo) != 0:
                err = ctypes.get_errno()
                raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                                   f"mlock(0x{lo:x}, {hi - lo}) failed: {os.strerror(err)}")
        return host                         # the address the device uses for it

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last:
            lo, hi = host - host % PAGE, -(-(host + size) // PAGE) * PAGE
            _libc.munlock(lo, hi - lo)
