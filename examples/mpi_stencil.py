"""A halo-exchange heat stencil across MPI ranks, one rank per device.

The 1-D rod of `cells` points (ends held at 0) is split into one slab per rank; each
rank maps its slab (plus one halo cell each side) to its device (local rank -> default
device), steps the stencil there, and swaps edge cells with its neighbours every step
through halo buffers that are prelocked (offload.lock), so offload's copies and MPI
share the same pinned pages. Rank 0 gathers the rod and checks it against numpy
running the same steps in one process. Prints PASS, time per step and the checksum.
Usage: mpiexec -n 2 python examples/mpi_stencil.py [--cells N] [--steps S]
(runs as one process without mpiexec; mpi4py is needed either way)
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time

import numpy as np

import offload

HOST_SOURCE = """
void step(const double *u, double *v, long n) {
  for (long i = 1; i <= n; ++i) v[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
}
"""
CUDA_SOURCE = r"""
extern "C" __global__ void step(const double *u, double *v, long n) {
  long i = 1 + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i <= n) v[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
}
"""
THREADS = 256


def kernels() -> offload.Image:
    """Host kernels, plus CUDA ones where NVRTC can build them."""
    host = offload.compile_c(HOST_SOURCE)
    try:
        return offload.Image.combine(offload.compile_cuda(CUDA_SOURCE), host)
    except offload.OffloadError:
        return host


def initial(cells: int) -> np.ndarray:
    """The starting rod: a saw tooth, both ends 0."""
    u = (np.arange(cells, dtype=np.float64) % 97) / 97.0
    u[0] = u[-1] = 0.0
    return u


def reference(cells: int, steps: int) -> np.ndarray:
    """The same steps in numpy, in one process (ends fixed at 0)."""
    u = np.zeros(cells + 2)
    u[1:-1] = initial(cells)
    v = u.copy()
    for _ in range(steps):
        v[1:-1] = u[1:-1] + 0.25 * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u, v = v, u
    return u[1:-1]


def device_for(comm) -> int:  # noqa: ANN001 - an mpi4py communicator
    """The local rank's device (local rank modulo the devices), or the initial device."""
    from mpi4py import MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    n = offload.omp_get_num_devices()
    return local % n if n else offload.omp_get_initial_device()


def run(cells: int, steps: int) -> int:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if cells < size:
        raise SystemExit(f"--cells must be at least the number of ranks ({size}), got {cells}")
    device = device_for(comm)
    offload.omp_set_default_device(device)
    k = kernels()
    counts = [cells // size + (r < cells % size) for r in range(size)]
    first = sum(counts[:rank])
    n = counts[rank]
    rod0 = np.zeros(cells + 2)
    rod0[1:-1] = initial(cells)
    u = rod0[first:first + n + 2].copy()        # the slab and its first halos
    v = u.copy()
    left = rank - 1 if rank > 0 else MPI.PROC_NULL
    right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
    # halo buffers: [left edge, right edge] out, [left halo, right halo] in; ends stay 0
    send, recv = np.zeros(2), np.zeros(2)
    init = offload.omp_get_initial_device()
    on_host = device == init
    grid = dict(teams=max(1, (n + THREADS - 1) // THREADS), threads=THREADS)

    comm.Barrier()
    t0 = time.perf_counter()
    pin = (lambda a: contextlib.nullcontext()) if on_host else \
        (lambda a: offload.locked(a, device=device))
    region = offload.target_data(offload.tofrom(u), offload.tofrom(v), device=device)
    with pin(send), pin(recv), region:
        du = offload.omp_get_mapped_ptr(u, device) if not on_host else u.ctypes.data
        dv = offload.omp_get_mapped_ptr(v, device) if not on_host else v.ctypes.data
        before = _stats(device)
        comm.Barrier()
        t1 = time.perf_counter()
        for _ in range(steps):
            offload.target(k.step, u, v, n, device=device, **grid)
            # edges out: v[1] and v[n], from the device into the pinned send buffer
            _copy(send, 0, dv + 8, device, init)
            _copy(send, 8, dv + 8 * n, device, init)
            comm.Sendrecv(send[0:1], dest=left, recvbuf=recv[1:2], source=right)
            comm.Sendrecv(send[1:2], dest=right, recvbuf=recv[0:1], source=left)
            # halos in: v[0] and v[n+1] on the device, from the pinned receive buffer
            _copy_in(dv, recv, 0, device, init)
            _copy_in(dv + 8 * (n + 1), recv, 8, device, init)
            u, v, du, dv = v, u, dv, du
        comm.Barrier()
        stepping = time.perf_counter() - t1
        halo = {k: v - before.get(k, 0) for k, v in _stats(device).items()}
    elapsed = time.perf_counter() - t0

    rod = np.empty(cells) if rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(u[1:-1]), (rod, counts) if rank == 0 else None, root=0)
    ok = True
    if rank == 0:
        assert rod is not None
        want = reference(cells, steps)
        ok = bool(np.allclose(rod, want, rtol=0, atol=1e-12))
        print(f"mpi_stencil: {size} rank(s), {cells} cells, {steps} steps, "
              f"{stepping / max(steps, 1) * 1e6:.1f} us/step, {elapsed:.3f} s with the maps, "
              f"checksum {rod.sum():.12e}")
    devices = comm.gather(_describe(device), root=0)
    halos = comm.gather(halo, root=0)
    if rank == 0:
        print("  devices: " + ", ".join(f"rank {r}: {d}" for r, d in enumerate(devices)))
        if any(halos):
            pinned = sum(h.get("to pinned", 0) + h.get("from pinned", 0) for h in halos)
            other = sum(h.get("to unpinned", 0) + h.get("from unpinned", 0) for h in halos)
            print(f"  halo copies while stepping: {pinned} bytes through pinned buffers, "
                  f"{other} bytes unpinned")
        print("PASS" if ok else "FAIL: differs from the one-process numpy run")
    return 0 if comm.bcast(ok, root=0) else 1


def _copy(dst: np.ndarray, offset: int, src: int, device: int, init: int) -> None:
    if offload.omp_target_memcpy(dst, src, 8, offset, 0, init, device) != 0:
        raise RuntimeError("halo copy from the device failed")


def _copy_in(dst: int, src: np.ndarray, offset: int, device: int, init: int) -> None:
    if offload.omp_target_memcpy(dst, src, 8, 0, offset, device, init) != 0:
        raise RuntimeError("halo copy to the device failed")


def _stats(device: int) -> dict[str, int]:
    if device == offload.omp_get_initial_device():
        return {}
    return dict(offload.runtime.current().manager.get_device(device).stats)


def _describe(device: int) -> str:
    if device == offload.omp_get_initial_device():
        return "the initial device (host)"
    dev = offload.runtime.current().manager.get_device(device)
    return f"device {device} ({dev.plugin.name})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=1 << 20, help="points on the rod")
    parser.add_argument("--steps", type=int, default=200, help="time steps")
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("mpi_stencil needs mpi4py: pip install mpi4py (and an MPI, e.g. openmpi-bin)")
        return 2
    return run(args.cells, args.steps)


if __name__ == "__main__":
    sys.exit(main())
