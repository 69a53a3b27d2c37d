"""offload: LLVM's libomptarget offload runtime for Python programs that use numpy.

The public face: re-exports only (api.py, omp.py, target.py and the layers below)."""
from . import api as _api
from . import omp as _omp
from . import omp_async as _omp_async
from . import testing  # noqa: F401 - offload.testing.state()
from .allocators import empty
from .api import *  # noqa: F403
from .capi.openmp import compile_openmp
from .compiler import compile_c
from .errors import ErrorCode, OffloadError, OffloadWarning
from .image import Image, Kernel, load_image
from .interop import DeviceArray, Event, Queue, Stream, device_array, stream, wait_stream
from .mapping import MapType
from .omp import *  # noqa: F403
from .omp_async import *  # noqa: F403
from .statistics import stats
from .target import target

_PYKERNELS = ("kernel", "prange", "atomic_add", "atomic_max", "atomic_min", "PyKernel")
__all__ = [*_api.__all__, *_omp.__all__, *_omp_async.__all__, "ErrorCode", "Image", "Kernel",
           "MapType",
           "OffloadError", "OffloadWarning", "compile_c", "compile_openmp", "load_image", "target",
           "DeviceArray", "Event", "Queue", "Stream", "device_array", "empty", "stats",
           "stream", "wait_stream", *_PYKERNELS]

# `offload.device` is not a function: keep the submodule out of sight (it stays importable
# as offload.device) so `offload.device(n)` gets the hint below.
globals().pop("device", None)


def __dir__() -> list[str]:
    return sorted({*globals(), *_PYKERNELS})


def __getattr__(name: str) -> object:
    if name in _PYKERNELS:                   # on first use: kernels written in Python
        from . import pykernels
        value = getattr(pykernels, name)
        globals()[name] = value
        return value
    if name == "__version__":                # on first use (metadata is slow to import)
        from importlib import metadata
        try:
            version = metadata.version("offload")
        except metadata.PackageNotFoundError:  # a source tree that was not installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    if name == "device":
        raise AttributeError("module 'offload' has no attribute 'device': list devices with "
                             "offload.devices(), and pass device=n to a construct")
    raise AttributeError(f"module 'offload' has no attribute {name!r}")
