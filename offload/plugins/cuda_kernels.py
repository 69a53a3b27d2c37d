"""CUDA kernels, as LLVM's CUDAKernelTy and the CUDA device's image hooks: modules from
cubins or PTX (the JIT's log on failure), kernel handles with their parameter layout,
launches (reused argument slots, launch-and-wait in one call, shared memory above 48 KiB
opted in), and clang OpenMP nvptx images (LLVM 19's conventions: _cuda_openmp.py)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ErrorCode, OffloadError
from ..image import Binary
from . import _cuda_driver as C
from . import _cuda_openmp
from ._cuda_driver import ffi
from .args import ArgSlots, pack_scalar, params_from_prototype
from .common import GenericDevice, GenericKernel
from .launch_geometry import checked_blocks
from .waits import SPIN_SECONDS, poll

_ffi = ffi
SHARED_DEFAULT = 48 << 10           # dynamic shared memory allowed without opting in


_REQUIRES_USM = 0x8                # requires unified_shared_memory (OMP_REQ_*)
_NOT_READY = C.CUDA_ERROR_NOT_READY


def _poll(query: Any, handle: Any, spin: Any = None) -> int:
    """poll() (the common wait policy) of a CUDA stream or event query; `spin`: the
    helper's spin of that query (Fast.spin_stream / spin_event), or None."""
    return poll(query, handle, _NOT_READY, spin)



class CUDAKernels(GenericDevice):
    """A CUDA device's kernel and image hooks (CUDADevice, in cuda_device.py, adds its
    memory, queues and events)."""

    plugin: Any
    context: Any
    cu_device: Any
    sm: tuple[int, int]
    max_block: int
    max_grid: int
    max_shared: int

    def activate(self) -> None:
        raise NotImplementedError

    def _attr(self, name: str) -> int:
        raise NotImplementedError

    def _finish_fast(self, rc: int, q: Any, what: str) -> None:
        raise NotImplementedError

    # ---- kernels ----------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        self.activate()
        mod = _ffi.new("CUmodule *")
        data = binary.data + (b"\0" if binary.format == "ptx" else b"")
        log = _ffi.new("char[]", 8192)
        opts = _ffi.new("int[]", [C.CU_JIT_ERROR_LOG_BUFFER, C.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES])
        vals = _ffi.new("void *[]", [log, _ffi.cast("void *", 8192)])
        rc = self.plugin.drv.lib.cuModuleLoadDataEx(mod, _ffi.from_buffer(data), 2, opts, vals)
        if rc != C.CUDA_SUCCESS:
            jit = _ffi.string(log).decode(errors="replace").strip()
            try:
                self.plugin.drv.check(rc, f"cuModuleLoadData({binary.describe()})")
            except OffloadError as exc:
                if jit:
                    raise OffloadError(exc.code, f"{exc.message}\nJIT log:\n{jit}") from None
                raise
        return mod[0]

    def _unload_impl(self, program: Any) -> None:
        self.activate()
        self.plugin.drv.lib.cuModuleUnload(program)

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        drv = self.plugin.drv
        self.activate()
        f = _ffi.new("CUfunction *")
        rc = drv.lib.cuModuleGetFunction(f, program, name.encode())
        if rc != C.CUDA_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND, f"kernel '{name}' not found: {drv.text(rc)}")
        decl = binary.prototypes.get(name)
        types = params_from_prototype(decl, name) if decl else None
        sizes: list[int] = []
        if drv.has_param_info:
            off, size = _ffi.new("size_t *"), _ffi.new("size_t *")
            while True:
                rc = drv.lib.cuFuncGetParamInfo(f[0], len(sizes), off, size)
                if rc == C.CUDA_ERROR_INVALID_VALUE:   # past the last parameter
                    break
                drv.check(rc, f"cuFuncGetParamInfo({name})")
                sizes.append(size[0])
        elif types is not None:         # before CUDA 12.4: sizes from the prototype
            sizes = [8 if p.pointer else p.size for p in types]
        else:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"kernel '{name}': this driver cannot report kernel parameters "
                               f"(cuFuncGetParamInfo is CUDA 12.4+) and the image carries no "
                               f"prototype; build it with compile_cuda or pass prototypes=")
        limit = _ffi.new("int *")
        drv.check(drv.lib.cuFuncGetAttribute(limit, C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                             f[0]), "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)")
        return GenericKernel(name, (f[0], limit[0]), sizes, decl or f"parameter sizes {sizes}",
                             types)

    def _geometry(self, kernel: GenericKernel, teams: int | None, threads: int | None,
                  shared_mem: int) -> tuple[int, int]:
        return checked_blocks(kernel.name, teams, threads, 128,
                              min(kernel.handle[1], self.max_block), self.max_grid,
                              shared_mem, self.max_shared)

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any], teams: int | None,
                     threads: int | None, queue: Any, shared_mem: int = 0) -> None:
        name = kernel.name
        fn = kernel.handle[0]
        grid, block = self._geometry(kernel, teams, threads, shared_mem)
        state = kernel.launch_state
        if state is None:
            state = kernel.launch_state = ArgSlots(kernel.params, _ffi)
        held = state.fill(args)
        if held is not None:                    # integers and addresses: reused memory
            params = held[1]
        else:
            params = _ffi.new("void *[]", max(1, len(args)))
            keep = []
            for i, (a, sz) in enumerate(zip(args, kernel.params, strict=False)):
                c = _ffi.new("char[]", pack_scalar(a, sz, f"argument {i} of kernel '{name}'"))
                keep.append(c)
                params[i] = c
        drv = self.plugin.drv
        fast = self.plugin.fast
        if queue is None and fast is not None and shared_mem <= SHARED_DEFAULT:
            drv.alive()                                  # launch and wait, in one call
            q = self.queues.get()
            drv.last_kernel = name
            rc = fast.launch_wait(fast.set_ctx, self.context, fast.launch, fn, grid, block,
                                  shared_mem, q, params, fast.query, SPIN_SECONDS)
            if held is not None:
                state.free.append(held)
            self._finish_fast(rc, q, f"cuLaunchKernel({name}, grid={grid}, block={block})")
            return
        self.activate()
        if shared_mem > SHARED_DEFAULT:                  # opt in above 48 KiB, as LLVM
            drv.check(drv.lib.cuFuncSetAttribute(
                fn, C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        with self.queue(queue) as q:                     # no queue: launch and wait
            drv.last_kernel = name
            rc = drv.lib.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared_mem, q, params,
                                        _ffi.NULL)
            if held is not None:                # the driver copied the values
                state.free.append(held)
            drv.check(rc, f"cuLaunchKernel({name}, grid={grid}, block={block})")

    # ---- clang OpenMP nvptx images (LLVM 19's conventions: _cuda_openmp.py) -----------
    def _omp_load_impl(self, image: bytes, indirect: Sequence[tuple[int, str]]) -> Any:
        binary = Binary.from_bytes(image, None)
        _cuda_openmp.prepare(self, self.load(binary), tuple(indirect))
        return binary

    def _omp_global_impl(self, program: Any, name: str) -> int | None:
        found = _cuda_openmp.global_address(self, self.load(program), name)
        return None if found is None else found[0]

    def _omp_launch_impl(self, program: Any, name: str, args: Sequence[int], teams: int,
                         threads: int, tripcount: int) -> tuple[int, int, str]:
        return _cuda_openmp.launch(self, program, name, args, teams, threads, tripcount)

    def _omp_launch_plan_impl(self, program: Any, name: str, teams: int, threads: int,
                              tripcount: int) -> Any:
        return _cuda_openmp.launch_plan(self, program, name, teams, threads, tripcount)

    def _omp_requires_impl(self, flags: int) -> None:
        if flags & _REQUIRES_USM and not self._attr("pageable memory access"):
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"the program requires unified_shared_memory, but CUDA device "
                               f"{self.id} cannot access pageable host memory (no HMM on "
                               f"this system)")
