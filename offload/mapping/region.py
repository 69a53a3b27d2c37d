"""One target region's data, the same for every entry point (target, its nowait and Stream
forms, the C ABI's __tgt_target_kernel and the legacy entries): map what the region maps,
keep every entry it uses marked in use while its kernel runs (so another thread's unmap
waits for the kernel), unmap (copying back unless the launch failed), let go.

    with Region(table, queue) as region:
        tgts = region.map(items)            # or map_by(...): the caller's own rules
        ... translate the arguments, launch ...
    # unmapped (copy_back=False after an exception), the marks released

The two fewer-steps shapes run the same steps without a Region object (they are the hot
paths): `Region.single_range` (one single-range clause) and `Region.on_marked` (every
array argument found mapped and marked). Whether a region may take them is the table's
`observed` (LIBOMPTARGET_INFO bits or a listener send it to the general rules), the one
table-level test every fewer-steps path asks.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from ..clauses import MapItem
from ..entries import HostDataToTarget


class Region:
    """The entries one region maps and uses, and how to unmap them."""

    __slots__ = ("table", "queue", "marked", "_unmap")

    def __init__(self, table: Any, queue: Any = None):
        self.table = table
        self.queue = queue                   # the queue its copies go on (None: the table's)
        #: entries marked in use by this region (its own maps, and entries another
        #: construct mapped that it found and marked: `hold`)
        self.marked: list[HostDataToTarget] = []
        self._unmap: Callable[[bool], None] | None = None

    def hold(self, entries: Sequence[HostDataToTarget | None]) -> None:
        """Entries the caller found and marked in use already (None skipped): released
        with the region's own."""
        self.marked += [e for e in entries if e is not None]

    def map(self, items: list[MapItem]) -> list[int]:
        """target_data_begin of `items` on the region's queue, their entries marked in use;
        the device address of each item."""
        self._first()
        got: list[HostDataToTarget] = []
        tgts = self.table.target_data_begin(items, self.queue, got)
        self.marked += got
        self._unmap = lambda copy_back: self.table.target_data_end(
            items, self.queue, copy_back=copy_back, own=self.marked)
        return tgts  # type: ignore[no-any-return]

    @staticmethod
    def single_range(table: Any, p: int, n: int, t: int, owner: Any, read_only: bool,
                     launch: Callable[..., Any], *args: Any) -> None:
        """A region of one clause of TO/FROM bits over [p, p+n), mapped in fewer steps
        where the table can (MappingTable.begin_single_range): `launch(device address,
        *args)` between the map and the unmap (no copy back when it raises); the entry's
        mark is let go by the unmap."""
        busy: list[HostDataToTarget] = []
        steps = table.steps
        tgt = steps.begin_single_range(p, n, t, owner, read_only, busy)
        try:
            launch(tgt, *args)
        except BaseException:
            steps.end_single_range(p, n, t, owner, busy[0], copy_back=False)
            raise
        steps.end_single_range(p, n, t, owner, busy[0])

    @staticmethod
    def on_marked(table: Any, busy: list[HostDataToTarget], launch: Callable[..., Any],
                  *args: Any) -> None:
        """A region that maps nothing, whose array arguments' entries the caller found and
        marked in use (`busy`): `launch(*args)`, then the marks let go."""
        try:
            launch(*args)
        finally:
            if busy:
                table.release_busy(busy)

    def map_by(self, begin: Callable[[list], Any],
               end: Callable[[Any, bool, list], None]) -> Any:
        """Mapping by the caller's own rules (the C ABI's map list: mappers, attached
        pointers): `begin(busy)` maps, marking the entries it uses in `busy`, and returns
        what `end(result, copy_back, own)` unmaps."""
        self._first()
        got: list[HostDataToTarget] = []
        result = begin(got)
        self.marked += got
        self._unmap = lambda copy_back: end(result, copy_back, self.marked)
        return result

    def _first(self) -> None:
        if self._unmap is not None:
            raise RuntimeError("Region: a region maps once")

    def unmap(self, copy_back: bool = True) -> None:
        """Undo what the region mapped (no copy back with `copy_back=False`: a failed
        launch); its marks stay until `release`."""
        undo, self._unmap = self._unmap, None
        if undo is not None:
            undo(copy_back)

    def keep(self) -> list[HostDataToTarget]:
        """The marks, handed to the caller (work still queued: released once it ran)."""
        marked, self.marked = self.marked, []
        return marked

    def release(self) -> None:
        """Let go of every mark the region holds."""
        marked, self.marked = self.marked, []
        if marked:
            self.table.release_busy(marked)

    def __enter__(self) -> Region:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.unmap(copy_back=kind is None)
        finally:
            self.release()
