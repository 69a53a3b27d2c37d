"""Test double: stand-ins for the CUDA driver entry points the compiled core and the CUDA
plugin's one-call helper call (cuCtxSetCurrent, cuMemcpy*Async, cuStreamQuery,
cuLaunchKernel, cuMemsetD8Async), as cffi callbacks that record each call, copy with
memmove and finish a stream after a set number of queries; a launch may run a Python
`kernel` on its parameters. Used where no GPU is (tests/plugins/cuda/test_cuda_fast*.py);
the GPU suites run the same paths on the real driver."""
import cffi

NOT_READY = 600                             # CUDA_ERROR_NOT_READY
ffi = cffi.FFI()


class Driver:
    """Stand-ins for cuCtxSetCurrent, a cuMemcpy*Async, cuStreamQuery, cuLaunchKernel and
    cuMemsetD8Async, recording their calls; the stream completes after `busy_polls`
    queries. A launch calls `kernel(params)`, when set, as the device would run it."""

    def __init__(self, busy_polls=0, ctx_rc=0, op_rc=0, done_rc=0):
        self.calls = []
        self.kernel = None
        self.busy_polls, self.ctx_rc, self.op_rc, self.done_rc = busy_polls, ctx_rc, op_rc, done_rc

        @ffi.callback("int(void *)")
        def set_ctx(ctx):
            self.calls.append(("ctx", int(ffi.cast("uintptr_t", ctx))))
            return self.ctx_rc

        @ffi.callback("int(uintptr_t, uintptr_t, size_t, void *)")
        def copy(dst, src, size, stream):
            self.calls.append(("copy", dst, src, size, int(ffi.cast("uintptr_t", stream))))
            if self.op_rc == 0:
                ffi.memmove(ffi.cast("void *", dst), ffi.cast("void *", src), size)
            return self.op_rc

        @ffi.callback("int(void *)")
        def query(stream):
            self.calls.append(("query",))
            if self.busy_polls < 0:
                return NOT_READY                    # never finishes
            if self.busy_polls:
                self.busy_polls -= 1
                return NOT_READY
            return self.done_rc

        @ffi.callback("int(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,"
                      " unsigned, void *, void **, void **)")
        def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            self.calls.append(("launch", int(ffi.cast("uintptr_t", fn)), gx, gy, gz, bx, by, bz,
                               shared, int(ffi.cast("uintptr_t", stream)),
                               ffi.cast("unsigned long long *", params[0])[0],
                               extra == ffi.NULL))
            if self.kernel is not None and self.op_rc == 0:
                self.kernel(params)
            return self.op_rc

        @ffi.callback("int(uintptr_t, unsigned char, size_t, void *)")
        def memset(dst, value, size, stream):
            self.calls.append(("memset", dst, value, size, int(ffi.cast("uintptr_t", stream))))
            if self.memset_rc == 0:
                ffi.memmove(ffi.cast("void *", dst), bytes([value]) * size, size)
            return self.memset_rc

        self.memset_rc = 0
        self.fns = {n: ffi.cast("void *", f) for n, f in
                    (("ctx", set_ctx), ("copy", copy), ("query", query), ("launch", launch),
                     ("memset", memset))}
        self._keep = (set_ctx, copy, query, launch, memset)

    def copy_wait(self, helper, dst, src, size, spin=1.0):
        f = self.fns
        return helper.offload_copy_wait(f["ctx"], ffi.cast("void *", 0xC7), f["copy"], dst, src,
                                        size, f["query"], ffi.cast("void *", 0x57), spin)


class Dead:
    """CUDADriver's `dead` flag (None while the context lives)."""
    dead = None
