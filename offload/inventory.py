"""What this process can offload to: `devices()`, one record per device, and
`compile_cuda`, which builds for the architecture of the GPUs found."""
from __future__ import annotations

from dataclasses import dataclass, field

from .image import Image
from .runtime import current as _current
from .runtime import operation


# ---- kernels and devices ------------------------------------------------------------
@operation
def compile_cuda(source: str, *, arch: str | None = None, ptx: bool = False) -> Image:
    """Compile CUDA C++ with NVRTC into an image (needs libnvrtc).

    Args:
        source: CUDA C++ whose kernels are `extern "C" __global__`.
        arch: e.g. 'sm_90'; defaults to the first CUDA device's, else sm_90.
        ptx: make PTX (JIT-compiled by the driver) instead of a cubin.

    Returns:
        An Image whose kernels are attributes.

    Raises:
        OffloadError: UNSUPPORTED without NVRTC, INVALID_ARGUMENT with the compiler's
            log when the source does not compile.
    """
    from .plugins.nvrtc import compile_cuda as _compile
    if arch is None:
        arch = _current().manager.architecture("cuda") or "sm_90"
    return _compile(source, arch=arch, ptx=ptx)


@dataclass
class DeviceRecord:
    """One device: its global number, plugin, name and the plugin's properties."""

    number: int
    plugin: str
    name: str
    properties: dict = field(default_factory=dict)


@operation
def devices() -> list[DeviceRecord]:
    """One record per offload device (the initial device not included).

    Example:
        >>> d = offload.devices()[0]
        >>> d.number, d.plugin, d.name
        (0, 'host', 'host CPU (x86_64)')
    """
    m = _current().manager
    out = []
    for n in range(m.num_devices()):
        dev = m.get_device(n)
        props = dev.info()
        out.append(DeviceRecord(n, dev.plugin.name, str(props.get("name", "?")), props))
    return out


