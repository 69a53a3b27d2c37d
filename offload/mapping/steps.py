"""A table's entry points for the common single-array steps, chosen once when the table
starts: the compiled core's (offload/accel_c, `CompiledSteps`) where it takes them, else
the table's own Python methods. Callers reach them as `table.steps.<name>`; no method of
the table is replaced."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class TableSteps(NamedTuple):
    """What a construct on one array calls (MappingTable's methods say what each does)."""

    begin_single_range: Callable[..., int]
    end_single_range: Callable[..., None]
    update_single_range: Callable[[int, int, int], None]
    #: a region's arguments on mapped data: `present(args)` -> PresentArgs(kernel_args,
    #: marked) or None (nothing marked); `launch_present(args, spec)` -> whether it also
    #: launched the kernel (marks given back); None without the compiled core
    present: Callable[[tuple], Any] | None
    launch_present: Callable[[tuple, Any], bool] | None
    #: gives back the marks `present` made (release_busy)
    release_present: Callable[[list], None]
    #: target_update of whole arrays: True when done, None when the lists hold anything
    #: else; None without the compiled core's copier
    update_arrays: Callable[[Any, Any], Any] | None
    #: a C-ABI kernel region on mapped data: `present_map(n, bases, begins, sizes, types,
    #: mappers)` (addresses) -> PresentArgs or None, as `present`; None without the
    #: compiled core (the general rules map the list)
    present_map: Callable[..., Any] | None
    #: and the kernel launched and waited for in C (an OmpLaunchPlan's spec, its first
    #: argument before the region's): True, False (the caller launches) or None (as
    #: present_map's None)
    launch_present_map: Callable[..., Any] | None
    #: and the kernel called directly (`call`, a direct call taking `nargs` arguments):
    #: True, False (not `nargs` arguments: nothing done) or as present_map's None
    call_present_map: Callable[..., Any] | None


def choose(table: Any, compiled: Any) -> TableSteps:
    """The steps of `table`: each of `compiled` (a CompiledSteps, None fields where the
    Python method stays) that is there, else the table's method."""
    def pick(name: str, python: Any) -> Any:
        got = None if compiled is None else getattr(compiled, name)
        return python if got is None else got
    return TableSteps(
        pick("begin_single_range", table.begin_single_range),
        pick("end_single_range", table.end_single_range),
        pick("update_single_range", table.update_single_range),
        pick("present", None), pick("launch_present", None),
        pick("release", table.release_busy), pick("update_arrays", None),
        pick("present_map", None), pick("launch_present_map", None),
        pick("call_present_map", None))
