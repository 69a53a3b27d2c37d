"""Zero-copy exchanges with CuPy and PyTorch: the cost of one hand-over, per call.

Export: offload.device_array(a) consumed by torch.from_dlpack / cupy.from_dlpack.
Import: a CuPy / PyTorch array taken as a device pointer (what target() and
omp_target_memcpy do with one). Round trip: both. Baselines in the same run: the same
hand-over between CuPy and PyTorch themselves. Every exchange is checked to keep the
pointer (zero bytes copied). Prints microseconds and ratios; writes bench/interop.png.
Usage: python bench/interop.py
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OFFLOAD_PLUGINS", "cuda")

import offload  # noqa: E402
from bench._util import arguments, machine, per_call, plot, table  # noqa: E402
from offload.dlpack import foreign_pointer  # noqa: E402


def main() -> None:
    arguments(__doc__).parse_args()
    import cupy
    try:
        import torch
    except ImportError:
        torch = None
    a = np.arange(1 << 20, dtype=np.float32)
    vals: dict[str, float] = {}
    with offload.target_data(offload.tofrom(a), device=0):
        ptr = offload.omp_get_mapped_ptr(a, 0)
        c = cupy.from_dlpack(offload.device_array(a, 0))
        assert c.data.ptr == ptr and foreign_pointer(c)[0] == ptr
        vals["export to CuPy (device_array + cupy.from_dlpack)"] = per_call(
            lambda: cupy.from_dlpack(offload.device_array(a, 0)))
        dv = offload.device_array(a, 0)
        vals["offload's part: device_array"] = per_call(lambda: offload.device_array(a, 0))
        vals["offload's part: __dlpack__ (versioned capsule)"] = per_call(
            lambda: dv.__dlpack__(max_version=(1, 0)))
        vals["import from CuPy (CAI, stream waited)"] = per_call(lambda: foreign_pointer(c))
        vals["round trip CuPy"] = per_call(
            lambda: foreign_pointer(cupy.from_dlpack(offload.device_array(a, 0))))
        if torch is not None:
            t = torch.from_dlpack(offload.device_array(a, 0))
            assert t.data_ptr() == ptr and foreign_pointer(t)[0] == ptr
            vals["export to PyTorch (device_array + torch.from_dlpack)"] = per_call(
                lambda: torch.from_dlpack(offload.device_array(a, 0)))
            vals["import from PyTorch (CAI, stream waited)"] = per_call(
                lambda: foreign_pointer(t))
            vals["round trip PyTorch"] = per_call(
                lambda: foreign_pointer(torch.from_dlpack(offload.device_array(a, 0))))
            vals["baseline: torch.from_dlpack(cupy array)"] = per_call(
                lambda: torch.from_dlpack(c))
            base = vals["baseline: torch.from_dlpack(cupy array)"]
        else:
            vals["baseline: cupy.from_dlpack(cupy array)"] = per_call(
                lambda: cupy.from_dlpack(c))
            base = vals["baseline: cupy.from_dlpack(cupy array)"]
    rows = [(k, f"{v * 1e6:7.2f} us", f"{v / base:5.2f}x") for k, v in vals.items()]
    name = offload.runtime.current().device(0).info().get("name", "GPU")
    print(f"offload bench/interop.py, {a.nbytes >> 20} MiB float32, {name}, host {machine()}")
    print(table(rows, ("exchange", "per call", "ratio to the library-to-library baseline")))
    print(plot(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "interop.png"),
               f"Zero-copy hand-overs ({name})", list(vals),
               {"us": [v * 1e6 for v in vals.values()]}, "microseconds per exchange"))
    offload.shutdown()


if __name__ == "__main__":
    main()
