"""offload: LLVM's libomptarget offload runtime for Python programs that use numpy."""
from .api import (  # noqa: F401
    INT_MAX, OFFLOAD_FAIL, OFFLOAD_SUCCESS, DeviceRecord, Handle, MapClause, Pinned, alloc,
    compile_cuda, delete, devices, from_, llvm_omp_target_alloc_device, llvm_omp_target_alloc_host,
    llvm_omp_target_alloc_shared, llvm_omp_target_free_device, llvm_omp_target_free_host,
    llvm_omp_target_free_shared, llvm_omp_target_lock_mem, llvm_omp_target_unlock_mem, lock,
    locked, omp_get_default_device, omp_get_initial_device, omp_get_mapped_ptr,
    omp_get_num_devices, omp_initial_device, omp_invalid_device, omp_is_initial_device,
    omp_set_default_device, omp_target_alloc, omp_target_associate_ptr,
    omp_target_disassociate_ptr, omp_target_free, omp_target_is_accessible,
    omp_target_is_present, omp_target_memcpy, omp_target_memcpy_rect, release, runtime, shutdown,
    target, target_data, target_enter_data, target_exit_data, target_update, taskwait, to, tofrom,
)
from .errors import ErrorCode, OffloadError  # noqa: F401
from .image import Image, Kernel, compile_c, load_image  # noqa: F401
from .mapping import MapType  # noqa: F401

__version__ = "0.1.0"
