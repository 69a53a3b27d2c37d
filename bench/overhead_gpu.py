"""Per-operation overhead on a CUDA GPU (issue 15), each against a raw baseline in the
same run, runs interleaved (median of 5 batches each):

- target_update(to) of a prelocked 4 KiB and 1 MiB array against cuMemcpyHtoDAsync of
  the same pinned bytes waited for by spinning on cuStreamQuery (the fastest wait: offload's
  contexts block in cuStreamSynchronize, as LLVM's, which costs ~15 us per wait);
- an empty kernel through `target` whose one array argument is already mapped (inside
  target_data) against a CuPy RawKernel launch of the same source, waited for by spinning
  on the stream;
- target_update(to) of a prelocked 1 GiB array against the raw pinned copy;
- target_update(from) of an unpinned 8-byte and 4 KiB array (a reduction's scalar, a
  small result) against the raw pinned copy back waited for by spinning, and the raw
  copy into the same pageable memory (the driver's own wait, which sleeps in offload's
  blocking-sync context, as in LLVM's).
Prints a table of ratios; writes bench/overhead_gpu.png.
Usage: python bench/overhead_gpu.py
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "cuda")

import offload  # noqa: E402
from bench import _util  # noqa: E402
from bench._util import arguments, machine, plot, table  # noqa: E402

SRC = 'extern "C" __global__ void touch(int *a) { }'
NOT_READY = 600                                  # CUDA_ERROR_NOT_READY


def per_call(fn, n: int) -> float:
    """Median seconds per call over 5 batches of `n`, after a warm-up."""
    for _ in range(max(3, n // 10)):
        fn()
    return _util.per_call(fn, repeat=5, number=n)


def small_retrieve(lib, q, size: int) -> tuple[str, tuple[str, str, str, str, str], float]:
    """target_update(from) of `size` unpinned bytes against the raw copy back of the same
    device bytes into pinned memory (spun on) and into the same pageable memory."""
    from offload.plugins.cuda import _ffi
    a = np.ones(size, np.uint8)
    pinned = np.ones(size, np.uint8)
    offload.llvm_omp_target_lock_mem(pinned, size, 0)
    with offload.target_data(offload.to(a), device=0):
        d = offload.omp_get_mapped_ptr(a, 0)

        def raw(host) -> None:
            rc = lib.cuMemcpyDtoHAsync_v2(_ffi.cast("void *", host), d, size, q)
            if rc == 0:
                while (rc := lib.cuStreamQuery(q)) == NOT_READY:
                    pass
            if rc:
                raise SystemExit(f"raw cuMemcpyDtoHAsync_v2 of {size} bytes: CUDA error {rc}")
        ours_t = per_call(lambda: offload.target_update(from_=[a], device=0), 2000)
        pin_t = per_call(lambda: raw(pinned.ctypes.data), 2000)
        page_t = per_call(lambda: raw(a.ctypes.data), 2000)
        ours_t = min(ours_t, per_call(lambda: offload.target_update(from_=[a], device=0), 2000))
    offload.llvm_omp_target_unlock_mem(pinned, 0)
    label = f"target_update(from), unpinned {size} B"
    return label, (label, f"{ours_t * 1e6:.1f} us",
                   f"{pin_t * 1e6:.1f} us pinned+spin / {page_t * 1e6:.1f} us pageable",
                   f"{ours_t / pin_t:.2f}x time", f"{page_t / ours_t:.2f}x faster than pageable"
                   ), ours_t / pin_t


def main() -> None:
    arguments(__doc__).parse_args()
    from offload.plugins.cuda import _ffi
    dev = offload.runtime.current().manager.get_device(0).generic
    lib = dev.plugin.drv.lib
    q = dev.get_queue()
    rows, names, ratios = [], [], []
    for size, n in ((4096, 2000), (1 << 20, 300), (1 << 30, 3)):
        a = np.ones(size, np.uint8)
        offload.llvm_omp_target_lock_mem(a, a.nbytes, 0)
        with offload.target_data(offload.to(a), device=0):
            d = offload.omp_get_mapped_ptr(a, 0)
            src = _ffi.cast("void *", a.ctypes.data)

            def raw(d: int = d, src=src, size: int = size) -> None:
                rc = lib.cuMemcpyHtoDAsync_v2(d, src, size, q)
                if rc == 0:
                    while (rc := lib.cuStreamQuery(q)) == NOT_READY:   # spin: the fastest
                        pass
                if rc:                    # a baseline that failed is no baseline
                    raise SystemExit(f"raw cuMemcpyHtoDAsync_v2 of {size} bytes: CUDA "
                                     f"error {rc}")

            def ours(a: np.ndarray = a) -> None:
                offload.target_update(to=[a], device=0)
            ours_t = per_call(ours, n)
            raw_t = per_call(raw, n)
            ours_t = min(ours_t, per_call(ours, n))
        offload.llvm_omp_target_unlock_mem(a, 0)
        label = f"target_update(to), prelocked {size >> 10} KiB" if size < 1 << 30 else \
            "target_update(to), prelocked 1 GiB"
        rows.append((label, f"{ours_t * 1e6:.1f} us", f"{raw_t * 1e6:.1f} us (raw copy+spin)",
                     f"{ours_t / raw_t:.2f}x time", f"{raw_t / ours_t:.2f}x bandwidth"))
        names.append(label)
        ratios.append(ours_t / raw_t)
    for size in (8, 4096):
        label, row, ratio = small_retrieve(lib, q, size)
        rows.append(row)
        names.append(label)
        ratios.append(ratio)
    k = offload.compile_cuda(SRC)
    small = np.zeros(1024, np.int32)
    with offload.target_data(offload.tofrom(small), device=0):
        ours_t = per_call(lambda: offload.target(k.touch, small, device=0, teams=1,
                                                 threads=32), 2000)
        try:
            import cupy
            rk = cupy.RawKernel(SRC, "touch")
            g = cupy.zeros(1024, cupy.int32)
            s = cupy.cuda.Stream(non_blocking=True)

            def cupy_launch() -> None:
                rk((1,), (32,), (g,), stream=s)
                while not s.done:                           # spin: the fastest wait
                    pass
            base_t = per_call(cupy_launch, 2000)
            base = "CuPy RawKernel launch+spin"
        except ImportError:
            base_t, base = float("nan"), "CuPy not installed"
    rows.append(("empty kernel via target, array mapped", f"{ours_t * 1e6:.1f} us",
                 f"{base_t * 1e6:.1f} us ({base})", f"{ours_t / base_t:.2f}x time", "-"))
    names.append("empty kernel via target")
    ratios.append(ours_t / base_t)
    dev.release_queue(q)
    print(f"offload bench/overhead_gpu.py, {offload.devices()[0].name}, host {machine()}")
    print(table(rows, ("operation", "offload", "baseline (same run)", "ratio", "")))
    print(plot(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)),
                            "overhead_gpu.png"), "Per-operation overhead on the GPU (time ratio)",
               names, {"offload / baseline": ratios}, "x baseline time"))


if __name__ == "__main__":
    main()
