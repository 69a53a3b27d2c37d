"""The host plugin: this CPU as an offload device, the default that always works.

Device memory is malloc'd through cffi (never mlocked); copies are memmove;
images are ELF shared objects for this CPU, loaded with cffi and called with
their C prototypes' types. Pinning is real mlock/munlock.
"""
from __future__ import annotations

import ctypes
import functools
import os
import types
from collections.abc import Callable, Sequence
from typing import Any

import cffi

from .._lazy import numpy as np
from ..arrays import extent
from ..errors import ErrorCode, OffloadError
from ..image import Binary
from ..pinned import Kind
from ._host_memory import (
    _MAP_ANON_PRIVATE,
    _MAP_FIXED_NOREPLACE,
    _PROT_RW,
    PAGE,
    _ffi,
    _libc,
    _PageLocks,
)
from ._libc import dlopen_bytes, memmove, memset
from .accel_specs import MemcpyCopier
from .args import check_arguments, params_from_ctype
from .common import (
    AllocKind,
    GenericDevice,
    GenericKernel,
    GenericPlugin,
    contiguous_tail,
    strided_rows,
)
from .host_queue import HostEvent, HostQueue

# the machine's name (uname -m) -> the e_machine of images this host runs
_MACHINES = {"x86_64": "EM_X86_64", "amd64": "EM_X86_64", "aarch64": "EM_AARCH64",
             "arm64": "EM_AARCH64", "ppc64le": "EM_PPC64", "riscv64": "EM_RISCV",
             "s390x": "EM_S390"}
_ARCH = os.uname().machine
HOST_MACHINE = _MACHINES.get(_ARCH.lower(), "EM_" + _ARCH.upper())


_NO_DYN = 2**64 - 1                 # dyn_ptr = ~0, as LLVM's host plugin passes
# (image handle, kernel name, argument count) -> the cffi function to call;
# (image handle, kernel name, "bound", argument count) -> it with its dyn_ptr bound
_OMP_KERNELS: dict[tuple[Any, ...], Any] = {}



class _Program:
    """A loaded host shared object: its cffi library, typed from the C prototypes."""

    def __init__(self, binary: Binary):
        self.ffi = cffi.FFI()
        self.errors: dict[str, str] = {}
        for name, decl in binary.prototypes.items():
            try:
                self.ffi.cdef(decl, override=True)
            except Exception as exc:       # noqa: BLE001 - cffi/pycparser errors vary
                self.errors[name] = f"{decl!r}: {exc}"
        if binary.format == "function":           # compiled in this process already
            self.lib = types.SimpleNamespace(**{
                name: self.ffi.cast(_pointer_type(decl), addr)
                for name, addr in binary.functions.items()
                if name not in self.errors and name in binary.prototypes
                and (decl := binary.prototypes[name])})
        else:
            self.lib = dlopen_bytes(self.ffi, binary.data, binary.digest[:16])


def _pointer_type(decl: str) -> str:
    """'void f(int *a, long n);' as the type of a pointer to it."""
    head, _, rest = decl.rstrip().rstrip(";").partition("(")
    result, _, name = head.rpartition(" ")
    return f"{result or 'void'} (*)({rest}"


class HostDevice(GenericDevice):
    plugin: HostPlugin
    host_memory = True          # device memory is host memory: a synchronous copy is memcpy

    def _init_impl(self) -> None:
        self.queues.synchronous = not self.plugin.config.host_async

    def accel_copier(self) -> MemcpyCopier:
        return MemcpyCopier()          # a copy without a queue is a memmove

    def _alloc_impl(self, size: int, kind: AllocKind) -> int:
        out = _ffi.new("void **")
        if _libc.posix_memalign(out, 64, size) != 0:
            raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                               f"cannot allocate {size} bytes on host device {self.id}")
        addr = int(_ffi.cast("uintptr_t", out[0]))
        if kind is AllocKind.HOST:
            try:
                self.plugin.pages.lock(addr, size)
            except BaseException:
                _libc.free(out[0])
                raise
        return addr

    def _reserve_impl(self, size: int, vaddr: int) -> int:
        """Record/replay memory: pages at `vaddr` when free there (a replay then needs no
        pointer moved), else anywhere; kept for the process's life."""
        length = (size + PAGE - 1) // PAGE * PAGE
        for at, flags in ((vaddr, _MAP_ANON_PRIVATE | _MAP_FIXED_NOREPLACE),
                          (0, _MAP_ANON_PRIVATE)):
            if flags & _MAP_FIXED_NOREPLACE and (not at or at % PAGE):
                continue
            p = int(_ffi.cast("uintptr_t", _libc.mmap(at, length, _PROT_RW, flags, -1, 0)))
            if p == 2**64 - 1:                                  # MAP_FAILED
                continue
            if at and p != at:                  # a kernel without MAP_FIXED_NOREPLACE
                _libc.munmap(p, length)
                continue
            return p
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES,
                           f"cannot reserve {size} bytes of record/replay memory on host "
                           f"device {self.id}")

    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None:
        if kind is AllocKind.HOST:
            self.plugin.pages.unlock(addr, size)
        _libc.free(_ffi.cast("void *", addr))

    def _submit_impl(self, tgt, host, size, queue, pinned) -> None:
        if isinstance(queue, HostQueue):
            queue.put(functools.partial(memmove, tgt, host, size))
        else:
            memmove(tgt, host, size)

    def _retrieve_impl(self, host, tgt, size, queue, pinned) -> None:
        if isinstance(queue, HostQueue):
            queue.put(functools.partial(memmove, host, tgt, size))
        else:
            memmove(host, tgt, size)

    # ---- queues and events: real ones with OFFLOAD_HOST_ASYNC=1 -------------
    def _create_queue_impl(self) -> Any:
        return HostQueue() if self.plugin.config.host_async else None

    def _destroy_queue_impl(self, queue: Any) -> None:
        if isinstance(queue, HostQueue):
            queue.close()

    def _sync_impl(self, queue: Any) -> None:
        if isinstance(queue, HostQueue):
            queue.drain()

    def _query_impl(self, queue: Any) -> bool:
        return not isinstance(queue, HostQueue) or queue.idle()

    def _event_create_impl(self) -> Any:
        return HostEvent()

    def _event_record_impl(self, event: Any, queue: Any) -> None:
        if isinstance(queue, HostQueue):
            event.reset()
            queue.put(event.fire)

    def _event_query_impl(self, event: Any) -> bool:
        return event.done()

    def _event_sync_impl(self, event: Any) -> None:
        event.wait()

    def _queue_wait_event_impl(self, queue: Any, event: Any) -> None:
        if isinstance(queue, HostQueue):
            queue.put(event.wait)

    def _host_function_impl(self, queue: Any, fn: Any) -> bool:
        if not isinstance(queue, HostQueue):
            return False
        queue.put(fn)
        return True

    def _copy_strided(self, to_device: bool, host: int, tgt: int, shape: tuple[int, ...],
                      strides: tuple[int, ...], itemsize: int) -> None:
        """One strided memcpy (numpy's copyto) between views of host and device memory
        whose last axis is a whole contiguous row."""
        k, row = contiguous_tail(shape, strides, itemsize)
        lo, hi = extent(shape[:k], strides[:k], row)
        views = []
        for base in (host, tgt):
            buf = (ctypes.c_char * (hi - lo)).from_address(base + lo)
            views.append(np.ndarray((*shape[:k], row), np.uint8, memoryview(buf), -lo,
                                    (*strides[:k], 1)))
        src, dst = (views[0], views[1]) if to_device else (views[1], views[0])
        np.copyto(dst, src)

    def _fill_impl(self, tgt: int, value: int, size: int, queue: Any) -> bool:
        if isinstance(queue, HostQueue):
            queue.put(functools.partial(memset, tgt, value, size))
        else:
            memset(tgt, value, size)
        return True

    def _exchange_impl(self, src, dst_device, dst, size, queue) -> bool:
        if not isinstance(dst_device, HostDevice):
            return False
        memmove(dst, src, size)
        return True

    def _load_impl(self, binary: Binary) -> _Program:
        self.plugin.check_binary(binary)
        return _Program(binary)

    def _kernel_impl(self, program: _Program, binary: Binary, name: str) -> GenericKernel:
        if name in program.errors:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"cannot type kernel '{name}': {program.errors[name]}")
        if name not in binary.prototypes:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"no C prototype for kernel '{name}' in this host image "
                               f"(known: {', '.join(binary.prototypes) or 'none'}); "
                               f"pass prototypes= to load_image")
        try:
            fn = getattr(program.lib, name)
        except AttributeError:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' is not defined in the image") from None
        ffi = program.ffi
        try:
            ftype = ffi.typeof(fn)
        except TypeError:
            ftype = None
        if ftype is None or ftype.kind != "function":
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"kernel '{name}': the image's prototype "
                               f"{binary.prototypes[name]!r} declares no function (a kernel "
                               f"is a function)")
        params = [(t, t.kind == "pointer") for t in ftype.args]
        # the same function typed with integer addresses for its pointers: called with
        # the device addresses as they are, no cast per argument
        direct = None
        if not ftype.ellipsis:
            decl = ", ".join("uintptr_t" if p else t.cname for t, p in params) or "void"
            try:
                direct = ffi.cast(f"{ftype.result.cname} (*)({decl})", fn)
            except Exception:                # noqa: BLE001 - a type cffi cannot name
                direct = None
        pointers = tuple(i for i, (_, p) in enumerate(params) if p)
        # char parameters: cffi wants bytes of one; an int is converted as C converts it
        chars = tuple(i for i, (t, p) in enumerate(params) if not p and t.cname == "char")
        return GenericKernel(name, (ffi, fn, direct, pointers, chars), params,
                             binary.prototypes[name], params_from_ctype(ffi, ftype))

    def _direct_call_impl(self, kernel: GenericKernel) -> Callable[..., Any] | None:
        direct, chars = kernel.handle[2], kernel.handle[4]
        return direct if not chars else None     # ints for pointers; no char converted

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any, shared_mem: int = 0) -> None:
        ffi, fn, direct, pointers, chars = kernel.handle
        call = self._direct_call_impl(kernel) if queue is None and \
            len(args) == len(kernel.params) else None
        if call is not None:
            try:                 # addresses as ints: cffi refuses anything else unrun
                call(*args)
                return
            except (TypeError, OverflowError):
                pass                 # converted below, or named by the check
        if chars:
            args = list(args)
            for i in chars:
                a = args[i] if i < len(args) else None
                if isinstance(a, (int, np.integer)) and not isinstance(a, bool) and \
                        -128 <= a <= 255:
                    args[i] = bytes((int(a) & 0xFF,))
        try:
            if direct is not None and len(args) == len(kernel.params):
                for i in pointers:
                    if type(args[i]) is not int:
                        direct = None
                        break
            if direct is not None:
                conv = args
                fn = direct
            else:
                conv = [_ffi_cast(ffi, t, a) if is_ptr else a
                        for (t, is_ptr), a in zip(kernel.params, args, strict=False)]
            if isinstance(queue, HostQueue):
                queue.put(functools.partial(fn, *conv))
            else:
                fn(*conv)
        except (TypeError, OverflowError) as exc:
            if kernel.types is not None:           # name the parameter, as the check does
                check_arguments(kernel.name, kernel.types, args)
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"bad argument for kernel '{kernel.name}': {exc}") from None

    def _is_accessible_impl(self, host: int, size: int) -> bool:
        return True

    # ---- clang OpenMP x86_64 images: each device its own copy, as LLVM's host plugin;
    # kernels are kernel(~0, args...), every argument pointer-sized
    def _omp_load_impl(self, image: bytes, indirect: Sequence[tuple[int, str]]) -> Any:
        return dlopen_bytes(None, image, f"image-{self.id}")

    def _omp_global_impl(self, program: Any, name: str) -> int | None:
        p = _libc.dlsym(program, name.encode())
        return None if p == _ffi.NULL else int(_ffi.cast("uintptr_t", p))

    def _omp_launch_impl(self, program: Any, name: str, args: Sequence[int], teams: int,
                         threads: int, tripcount: int) -> tuple[int, int, str]:
        self._omp_kernel(program, name, len(args))(_NO_DYN, *args)   # without the GIL
        # as LLVM 19's host plugin reports it: the clauses' values, else 1; Generic mode
        return teams if teams > 0 else 1, threads if threads > 0 else 1, "Generic"

    def _omp_direct_call_impl(self, program: Any, name: str,
                              nargs: int) -> Callable[..., Any] | None:
        key = (program, name, "bound", nargs)       # its dyn_ptr bound
        call = _OMP_KERNELS.get(key)
        if call is None:
            call = _OMP_KERNELS[key] = functools.partial(
                self._omp_kernel(program, name, nargs), _NO_DYN)
        return call

    def _omp_kernel(self, program: Any, name: str, nargs: int) -> Any:
        """Kernel `name` of an image as a C function of dyn_ptr and `nargs` arguments."""
        key = (program, name, nargs)                # a cdata hashes by its address
        fn = _OMP_KERNELS.get(key)
        if fn is None:
            addr = self._omp_global_impl(program, name)
            if addr is None:
                raise OffloadError(ErrorCode.NOT_FOUND,
                                   f"kernel '{name}' not in the device image")
            t = _ffi.typeof(f"void (*)({', '.join(['uintptr_t'] * (nargs + 1))})")
            fn = _OMP_KERNELS[key] = _ffi.cast(t, addr)
        return fn

    def _info_impl(self) -> dict:
        return {"name": f"host CPU ({_ARCH})", "kind": "host",
                "machine": HOST_MACHINE, "cores": os.cpu_count(), "page size": PAGE}


def _ffi_cast(ffi: cffi.FFI, t: Any, value: Any) -> Any:
    if not isinstance(value, int):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"pointer argument must be an address (int), got {type(value).__name__}")
    return ffi.cast(t, value)


class HostPlugin(GenericPlugin[HostDevice]):
    name = "host"
    priority = 100
    device_class = HostDevice
    # freed "device" memory kept for the next allocation of the same size (as the GPU
    # plugins): no allocator round trip, and no fresh pages to fault in for big arrays
    device_pool_bytes = 256 << 20
    omp_image_kind = "x86_64" if HOST_MACHINE == "EM_X86_64" else None

    def _data_update_strided(self, d: int, to_device: bool, host: int, tgt: int,
                             shape: tuple[int, ...], strides: tuple[int, ...],
                             itemsize: int) -> None:
        """Device memory is host memory here: one strided copy, not one per row."""
        rows, row, _ = strided_rows(shape, strides, itemsize)
        self.device(d)._copy_strided(to_device, host, tgt, shape, strides, itemsize)
        self.device(d).count(("to " if to_device else "from ") + "unpinned", rows * row)

    def __init__(self, config):
        super().__init__(config)
        self.pages = _PageLocks()

    def _init_impl(self) -> int:
        return self.config.host_num_devices

    def check_binary(self, binary: Binary, dev: HostDevice | None = None) -> None:
        """Raise INVALID_BINARY naming what is wrong unless this host can load it."""
        if binary.format == "function":
            return                              # compiled for this process's own host
        if binary.format != "elf":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"the host plugin loads ELF shared objects, not {binary.format}")
        e = binary.header
        want = f"ELF64 {HOST_MACHINE} ET_DYN"
        problems = []
        if e.elf_class != 64:
            problems.append(f"class ELF{e.elf_class}")
        if e.machine != HOST_MACHINE:
            problems.append(f"machine {e.machine}")
        if e.type != "ET_DYN":
            problems.append(f"type {e.type}")
        if problems:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"image is {e.describe()} ({', '.join(problems)}); this host "
                               f"needs {want}")

    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        if first:
            self.pages.lock(host, size)
        return host

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        if last:
            self.pages.unlock(host, size)

    def locked_pages(self) -> int:
        """Distinct pages under our pinned entries (VmLck / page size, when nothing else
        in the process mlocks)."""
        ranges = sorted((e.host // PAGE, -(-e.end // PAGE)) for e in self.pinned.entries()
                        if e.kind is not Kind.EXTERNAL)
        total, reach = 0, 0
        for lo, hi in ranges:
            lo = max(lo, reach)
            if hi > lo:
                total += hi - lo
                reach = hi
        return total
