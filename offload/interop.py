"""Zero-copy interop: a mapped array's device copy as a DLPack / CUDA Array Interface
object (`device_array`), foreign device arrays (CuPy, PyTorch, anything with
`__cuda_array_interface__` or `__dlpack__`) as kernel arguments and copy endpoints, and
waiting on a foreign stream.

DLPack capsules are built here with cffi (the DLPack 1.0 versioned layout, and the 0.x
layout for consumers that ask for no version); the deleter a consumer calls releases them.
"""
from __future__ import annotations

import contextlib
import functools
import math
import weakref
from typing import Any

import _cffi_backend

from ._lazy import numpy as np
from .arrays import as_array, span
from .dlpack import (
    KDL_CPU,
    KDL_CUDA,
    KDL_CUDA_HOST,
    KDL_ROCM,
    KDL_ROCM_HOST,
    ForeignPointer,
    Layout,
    capsule,
)
from .errors import ErrorCode, OffloadBufferError, OffloadError
from .interrupts import defers_interrupts, finalizer
from .runtime import current as _current
from .runtime import omp_initial_device, operation, release_operation, resource_operation

_ffi = _cffi_backend.FFI()           # (built-in types only: no C parser needed)

__all__ = ["DeviceArray", "Event", "Queue", "Stream", "device_array", "dl_device_of", "stream",
           "wait_stream"]

class DeviceArray:
    """The device copy of a mapped array: `ptr`, `nbytes`, `shape`, `dtype`, `device`,
    and the `__dlpack__` / `__dlpack_device__` protocols (plus
    `__cuda_array_interface__` on a CUDA device); no byte is copied. It exports only
    while the mapping exists; the device memory stays allocated while the view, or a
    consumer's tensor made from it, lives (after the mapping and the runtime too)."""

    def __init__(self, ptr: int, array: np.ndarray | None, device: int,
                 dl_device: tuple[int, int], plugin: str, entry: Any = None,
                 table: Any = None, shape: tuple[int, ...] = (), dtype: Any = None,
                 layout: Layout | None = None):
        self.ptr = ptr
        self.array = array                  # the host copy (None: memory born on the device)
        if array is not None:
            self.shape, self.dtype, self.nbytes = array.shape, array.dtype, array.nbytes
        else:
            self.shape, self.dtype = tuple(shape), np.dtype(dtype)
            self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.device = device
        self.plugin = plugin
        self._dl_device = dl_device
        self._byte_strides = None if array is None or array.flags.c_contiguous \
            else array.strides              # None: compact row-major
        self._read_only = array is not None and not array.flags.writeable
        self._entry, self._table = entry, table
        self._layout = layout

    def _strides(self) -> tuple[int, ...] | None:
        if self._byte_strides is None:
            return None                     # compact row-major: DLPack says NULL
        return tuple(s // self.dtype.itemsize for s in self._byte_strides)

    def _make_layout(self) -> Layout:
        """The DLPack layout, made once per view of a mapping while the mapping lives."""
        entry = self._entry
        key = (self.ptr, self.shape, self._byte_strides, self.dtype)
        views = entry.views if entry is not None else None
        layout = views.get(key) if views is not None else None
        if layout is None:
            layout = Layout(self.ptr, self._dl_device, self.shape, self._strides(), self.dtype)
            if entry is not None:
                if views is None:
                    views = entry.views = {}
                if len(views) < 64:
                    views[key] = layout
        return layout

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._dl_device

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of the device copy (versioned when the consumer asks for
        1.x). offload's work on the array has finished when this returns, so the data is
        ready on any stream the consumer names."""
        if copy:
            raise OffloadBufferError(ErrorCode.UNSUPPORTED,
                                     "device_array exports without copies")
        if dl_device is not None and tuple(dl_device) != self._dl_device:
            raise OffloadBufferError(ErrorCode.UNSUPPORTED,
                                     f"device_array lives on {self._dl_device}, not {dl_device}")
        _wait_for_work(self)
        if self._layout is None:
            self._layout = self._make_layout()
        return capsule(self._layout, self._read_only, self,
                       max_version is not None and max_version[0] >= 1)

    @property
    def read_only(self) -> bool:
        """Whether the host array is read-only (so the export says the copy is)."""
        return self._read_only

    def __offload_device_pointer__(self) -> ForeignPointer:
        """Its device block: a kernel argument or copy endpoint on any plugin."""
        _wait_for_work(self)
        return ForeignPointer(self.ptr, self.nbytes, self._read_only)

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.plugin != "cuda":
            raise AttributeError("__cuda_array_interface__: not a CUDA device array")
        _wait_for_work(self)
        return {"shape": self.shape, "typestr": self.dtype.str,
                "data": (self.ptr, self._read_only), "version": 3,
                "strides": self._byte_strides,
                "stream": None}             # ready: no stream to order against

    def __repr__(self) -> str:
        return (f"<DeviceArray {self.dtype}{list(self.shape)} at 0x{self.ptr:x} on device "
                f"{self.device} ({self.plugin})>")


def _wait_for_work(view: DeviceArray) -> None:
    """Let nowait work in flight on the array's mapping finish first; a view whose
    mapping is gone exports nothing (its block is no longer the array's device copy)."""
    e = view._entry
    if e is not None and view.array is not None:
        p, n = span(view.array)
        if view._table.lookup(p, max(n, 1)) is not e:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"device_array: the mapping of the array at 0x{p:x} ({n} "
                               f"bytes) on device {view.device} was removed; views exported "
                               f"before keep their memory, but a new export needs the array "
                               f"mapped again and a new device_array")
        if e.busy:
            view._table.wait_idle(p, n)


_DL_KIND = {"cuda": (KDL_CUDA, KDL_CUDA_HOST), "amdgpu": (KDL_ROCM, KDL_ROCM_HOST)}


def dl_device_of(dev: Any) -> tuple[int, int]:
    """The DLPack (device type, id) of a device's memory: kDLCPU on the host plugin."""
    kind = _DL_KIND.get(dev.plugin.name, (KDL_CPU, KDL_CPU))[0]
    return kind, dev.local_id if kind != KDL_CPU else 0


@operation
def device_array(a: Any, device: int | None = None) -> DeviceArray:
    """The device copy of mapped array `a` as a zero-copy DLPack / CUDA Array Interface
    object, for CuPy (`cupy.from_dlpack`, `cupy.asarray`), PyTorch (`torch.from_dlpack`)
    or, on the host plugin, `numpy.from_dlpack`.

    Raises:
        OffloadError: NOT_FOUND when `a` is not mapped on the device; INVALID_VALUE for
            the initial device (`a` itself is the host copy).

    Example:
        >>> with offload.target_data(offload.tofrom(a), device=0):
        ...     t = torch.from_dlpack(offload.device_array(a, 0))   # same memory
    """
    arr = a if type(a) is np.ndarray and a.flags.c_contiguous and not a.dtype.hasobject \
        else as_array(a, "device_array")
    dev = _current().device(device)
    if dev is None:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           "device_array: the initial device holds the array itself")
    p, n = span(arr)
    if n == 0:                          # nothing to view: an empty export, at NULL
        return DeviceArray(0, arr, dev.number, dl_device_of(dev), dev.plugin.name)
    e = dev.table.acquire_busy(p, n)    # in use until the view holds its block
    if e is None:
        raise OffloadError(ErrorCode.NOT_FOUND,
                           f"device_array: the array at 0x{p:x} ({n} bytes) is not mapped on "
                           f"device {dev.number}; map it first (target_data, "
                           f"target_enter_data)")
    try:
        view = DeviceArray(e.tgt_begin + (p - e.hst_begin), arr, dev.number,
                           dl_device_of(dev), dev.plugin.name, e, dev.table)
        # the block stays allocated while the view (or a capsule made from it) lives, even
        # past the mapping and the runtime; a marked entry takes the Python path when
        # unmapped
        if e.views is None:
            e.views = {}
        blocks = dev.generic.exported
        blocks.hold(e.tgt_begin)
        weakref.finalize(view, _release_block, blocks, e.tgt_begin)
    finally:
        dev.table.release_busy([e])
    return view


class Queue:
    """One of offload's queues (a CUDA stream, a host worker queue), handed out: work
    queued on it runs in order. `handle` is its raw stream (a CUstream on CUDA, 0 where
    the plugin's queues are not driver objects) for `cupy.cuda.ExternalStream(q.handle)`
    or `torch.cuda.ExternalStream(q.handle)`; `target(..., stream=q)` runs a region on
    it. `record()` gives an Event; `wait_event(e)` orders later work after it without
    blocking the host. `close()` (or the end of a `with` block) waits and gives it back."""

    def __init__(self, device: int, queue: Any, handle: int, owner: Any):
        self.device = device
        self.queue = queue
        self.handle = handle
        self._owner = owner               # the plugin device (None: the initial device)
        self._open = owner is not None

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (cuda.core, CuPy): (version 0, handle)."""
        return 0, self.handle

    def _check(self, what: str) -> None:
        if self._owner is not None and not self._open:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"Queue.{what}: the queue is closed")

    def synchronize(self) -> None:
        """Wait for everything queued, polling (Ctrl-C still works); raises the first
        error the queued work raised."""
        self._check("synchronize")
        if self._owner is not None:
            self._owner.sync_queue(self.queue)

    def query(self) -> bool:
        """Whether everything queued has run."""
        self._check("query")
        return self._owner is None or self._owner.query_queue(self.queue)

    def record(self) -> Event:
        """An event complete when the queue reaches this point."""
        self._check("record")
        if self._owner is None:
            return Event(None, None)
        ev = self._owner.event_create()
        self._owner.event_record(ev, self.queue)
        return Event(self._owner, ev)

    def wait_event(self, event: Event) -> None:
        """Later work on this queue waits for `event` (the host does not)."""
        self._check("wait_event")
        if not isinstance(event, Event):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"Queue.wait_event: expected an Event, got {type(event).__name__}")
        if event._owner is None or self._owner is None:
            event.wait()                  # complete already, or the host itself waits
        elif event._owner is self._owner:
            self._owner.queue_wait_event(self.queue, event.event)
        else:                             # another device: wait on the host first
            event.wait()

    def launch_host_function(self, fn: Any, *args: Any) -> None:
        """Call fn(*args) on a host thread when the queue reaches this point (its
        errors come back from `synchronize`)."""
        self._check("launch_host_function")
        if not callable(fn):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"launch_host_function: expected a callable, got "
                               f"{type(fn).__name__}")
        call = functools.partial(fn, *args)
        if self._owner is None:
            call()
        else:
            self._owner.host_function(self.queue, call)

    @release_operation
    def close(self) -> None:
        """Wait for the queue, then give it back (once)."""
        if self._owner is not None and self._open:
            try:
                self._owner.sync_queue(self.queue)
            finally:
                self._open = False
                self._owner.release_queue(self.queue)

    @defers_interrupts           # the caller holds the queue already: the block owns it
    def __enter__(self) -> Queue:
        return self

    @release_operation
    def __exit__(self, *exc: Any) -> None:
        self.close()

    @finalizer
    def __del__(self) -> None:
        # dropped without close(): given back by the next stream() (not here: a
        # finalizer may run where the device's queue lock is held)
        if getattr(self, "_open", False) and self._owner is not None:
            self._open = False
            _DROPPED.append((self._owner, self.queue))

    def __repr__(self) -> str:
        return f"<offload.Queue 0x{self.handle:x} on device {self.device}>"


#: (plugin device, queue) of Queues dropped unclosed; list.append and pop are atomic
_DROPPED: list[tuple[Any, Any]] = []


def _give_back_dropped() -> None:
    while _DROPPED:
        try:
            owner, queue = _DROPPED.pop()
        except IndexError:
            return
        with contextlib.suppress(OffloadError):      # its device went meanwhile
            owner.release_queue(queue)


Stream = Queue      # the name the design page (docs/design.md §5) and the interop docs use


class Event:
    """A point in a Queue: `query()`, `wait()` (the host waits, interruptibly);
    `Queue.wait_event` orders another queue after it."""

    def __init__(self, owner: Any, event: Any):
        self._owner = owner
        self.event = event

    def query(self) -> bool:
        """Whether the queue has reached the event."""
        return self._owner is None or self._owner.event_query(self.event)

    def wait(self) -> None:
        """Wait on the host until the queue reaches the event (Ctrl-C still works)."""
        if self._owner is not None:
            self._owner.event_sync(self.event)

    def __repr__(self) -> str:
        if self._owner is None:
            return "<offload.Event on the initial device (complete)>"
        o = self._owner
        return f"<offload.Event on {o.plugin.name} device {o.id} (plugin-local number)>"

    @finalizer
    def __del__(self) -> None:
        owner = self._owner
        if owner is not None and self.event is not None:
            with contextlib.suppress(Exception):
                owner.event_destroy(self.event)


@resource_operation(lambda q, *_: q.close())
def stream(device: int | None = None) -> Queue:
    """One of offload's queues on `device`, with a raw handle other libraries can queue
    work on (see Queue). The initial device gives a Queue with handle 0 on which
    everything is complete at once."""
    _give_back_dropped()
    dev = _current().device(device)
    if dev is None:
        return Queue(omp_initial_device, None, 0, None)
    q = dev.get_queue()
    return Queue(dev.number, q, _handle(q), dev.generic)


def _handle(queue: Any) -> int:
    if queue is None:
        return 0
    if isinstance(queue, int):
        return queue
    if isinstance(queue, _ffi.CData):
        return int(_ffi.cast("uintptr_t", queue))
    return 0                          # a plugin's own queue object, not a driver handle


@operation
def wait_stream(stream: Any, device: int | None = None) -> None:
    """Wait until the work a foreign library queued on CUDA stream `stream` (a raw
    CUstream handle: `cupy.cuda.get_current_stream().ptr`,
    `torch.cuda.current_stream().cuda_stream`) has finished, before offload's next
    operation: an event recorded on that stream, waited for by polling (so Ctrl-C still
    works). No device-wide synchronize."""
    if isinstance(stream, Queue):
        stream.synchronize()
        return
    if hasattr(stream, "__cuda_stream__"):
        stream = stream.__cuda_stream__()[1]
    elif not isinstance(stream, int):
        stream = getattr(stream, "ptr", getattr(stream, "cuda_stream", stream))
    if not isinstance(stream, int) or stream < 0:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"wait_stream: expected a raw stream handle (int) or a CuPy / "
                           f"PyTorch stream, got {stream!r}")
    dev = _current().device(device)
    waiter = getattr(dev.plugin, "wait_foreign_stream", None) if dev is not None else None
    if waiter is not None:            # else nothing of that library runs here to wait for
        waiter(stream)


@finalizer
def _release_block(blocks: Any, addr: int) -> None:
    """A DeviceArray is gone: its block's hold is given back (ExportedBlocks.release)."""
    blocks.release(addr)
