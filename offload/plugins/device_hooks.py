"""GenericDevice's vendor hooks: the `_*_impl` methods a vendor plugin fills in (LLVM's
GenericDeviceTy virtuals), with the defaults for a device whose queues are synchronous.
No policy here: GenericDevice (common.py) calls them."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ErrorCode, OffloadError
from ..image import Binary
from .accel_specs import LaunchSpec, OmpLaunchPlan
from .args import GenericKernel
from .memory_pool import AllocKind


class DeviceHooks:
    """The hooks of one device; `plugin` is its GenericPlugin."""

    plugin: Any

    # ---- vendor hooks -----------------------------------------------------
    def _init_impl(self) -> None: ...
    def _deinit_impl(self) -> None: ...
    def _alloc_impl(self, size: int, kind: AllocKind) -> int: raise NotImplementedError
    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None: raise NotImplementedError

    def _submit_impl(self, tgt: int, host: int, size: int, queue: Any,
                     pinned: int | None) -> None:
        """Host -> device. `pinned` is the device-accessible address of `host` if pinned."""
        raise NotImplementedError

    def _retrieve_impl(self, host: int, tgt: int, size: int, queue: Any,
                       pinned: int | None) -> None:
        raise NotImplementedError

    def _exchange_impl(self, src: int, dst_device: Any, dst: int, size: int,
                       queue: Any) -> bool:
        """Device -> device; False when this pair needs the host in between."""
        return False

    def _accel_launch_impl(self, kernel: GenericKernel, teams: int | None,
                           threads: int | None, shared_mem: int) -> LaunchSpec | None:
        """The LaunchSpec with which offload/accel_c launches this kernel itself, or None
        where the vendor's C path does not apply (the geometry refused: `_launch_impl`
        then explains)."""
        return None

    def _load_impl(self, binary: Binary) -> Any: raise NotImplementedError

    def _kernel_impl(self, program: Any, binary: Binary, name: str) -> GenericKernel:
        """Find kernel `name` in a loaded program (raise NOT_FOUND when absent)."""
        raise NotImplementedError

    def _copy_now_impl(self, to_device: bool, tgt: int, host: int, size: int) -> bool:
        """Copy pinned host memory to (or from) the device and wait for it, on a queue of
        the device's own, in one step; False, with nothing done, where the device has no
        such path (the caller then borrows a queue)."""
        return False

    def _launch_impl(self, kernel: GenericKernel, args: Sequence[Any],
                     teams: int | None, threads: int | None, queue: Any,
                     shared_mem: int = 0) -> None:
        """Launch on `queue` (None: launch and wait); `shared_mem` bytes of dynamic
        shared (group) memory."""
        raise NotImplementedError

    def _direct_call_impl(self, kernel: GenericKernel) -> Callable[..., Any] | None:
        """A callable that runs `kernel` to completion on its device-ready arguments
        as _launch_impl passes them (no queue, no geometry, no shared memory), or None
        where the vendor has none."""
        return None

    def _unload_impl(self, program: Any) -> None:
        """Unload a program _load_impl made (one that lost a race to load first)."""

    def _before_reuse_impl(self) -> None:
        """Called before freed device memory goes to the pool: wait for any queued work
        that may still use it (the driver's own free would)."""

    # ---- events (defaults for plugins whose queues are synchronous) ---------
    def _event_create_impl(self) -> Any:
        """A new event, complete until recorded."""
        return None

    def _event_record_impl(self, event: Any, queue: Any) -> None:
        """Make `event` complete when `queue` reaches this point."""

    def _event_query_impl(self, event: Any) -> bool:
        return True

    def _event_sync_impl(self, event: Any) -> None:
        """Wait on the host until `event` is complete (interruptibly)."""

    def _queue_wait_event_impl(self, queue: Any, event: Any) -> None:
        """Make later work on `queue` wait for `event`, without blocking the host."""

    def _event_destroy_impl(self, event: Any) -> None: ...

    def _timing_event_impl(self) -> Any:
        """A new event whose completion the device timestamps, for the profile; None:
        the device has no clock of its own (the profile takes the host's)."""
        return None

    def _event_elapsed_ns_impl(self, start: Any, end: Any) -> int:
        """Device nanoseconds from timing event `start` to `end`, both complete."""
        raise NotImplementedError


    def _host_function_impl(self, queue: Any, fn: Callable[[], None]) -> bool:
        """Queue a host function on `queue`; False: the generic layer waits for the
        queue and calls it."""
        return False

    def _copy_2d_impl(self, to_device: bool, tgt: int, tgt_pitch: int, host: int,
                      host_pitch: int, width: int, height: int, queue: Any,
                      pinned: int | None = None) -> bool:
        """Queue one 2-D copy of `height` rows of `width` bytes between host rows
        `host_pitch` apart and device rows `tgt_pitch` apart (`pinned`: the device-
        accessible address of `host` where it is pinned); False when the device cannot
        (nothing was copied: the generic layer copies row by row)."""
        return False

    def _fill_impl(self, tgt: int, value: int, size: int, queue: Any) -> bool:
        """Set `size` bytes at device address `tgt` to `value` on the device, queued on
        `queue`; False when the device cannot (the generic layer then copies a filled
        host buffer)."""
        return False

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        """A pinned host buffer of `size` bytes the device can DMA from, and a queue."""
        raise NotImplementedError

    def _free_staging_impl(self, addr: int, queue: Any) -> None: ...

    # clang OpenMP device images (the C API's drop-in libomptarget): the plugin's
    # `omp_image_kind` says which kind it runs
    def _omp_load_impl(self, image: bytes, indirect: Sequence[tuple[int, str]]) -> Any:
        """Load a raw device image (`indirect`: its `declare target indirect` functions as
        (host address, entry name)); the loaded program."""
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"plugin {self.plugin.name} runs no clang OpenMP images")

    def _omp_global_impl(self, program: Any, name: str) -> int | None:
        """Device address of a global of a loaded image, or None."""
        return None

    def _omp_launch_impl(self, program: Any, name: str, args: Sequence[int],
                         teams: int, threads: int, tripcount: int) -> tuple[int, int, str]:
        """Run kernel `name` (pointer-sized arguments; LLVM's num_teams / thread_limit /
        trip count) to completion; how it ran, for LIBOMPTARGET_INFO: (blocks, threads,
        execution mode) as the plugin reports them."""
        raise OffloadError(ErrorCode.UNSUPPORTED,
                           f"plugin {self.plugin.name} runs no clang OpenMP images")

    def _omp_direct_call_impl(self, program: Any, name: str,
                              nargs: int) -> Callable[..., Any] | None:
        """A callable that runs kernel `name` to completion on its `nargs` arguments
        as _omp_launch_impl would with the default geometry, or None."""
        return None

    def _omp_launch_plan_impl(self, program: Any, name: str, teams: int, threads: int,
                              tripcount: int) -> OmpLaunchPlan | None:
        """How offload/accel_c launches kernel `name` as _omp_launch_impl would, with
        nothing for Python to do around it, or None (the Python path)."""
        return None

    def _omp_requires_impl(self, flags: int) -> None:
        """Refuse `requires` flags this device cannot honour (by name)."""

    def _create_queue_impl(self) -> Any: return None
    def _destroy_queue_impl(self, queue: Any) -> None: ...
    def _sync_impl(self, queue: Any) -> None: ...
    def _query_impl(self, queue: Any) -> bool: return True
    def _info_impl(self) -> dict: return {}
    def _is_accessible_impl(self, host: int, size: int) -> bool: return False
