"""LLVM 19's launch geometry for clang OpenMP kernels (GenericKernelTy::getNumThreads and
getNumBlocks; offload/test/offloading/high_trip_count_block_limit.cpp): the rule, common
to every GPU plugin; a plugin gives its grid values and the kernel's limits."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..errors import ErrorCode, OffloadError

EXEC_GENERIC, EXEC_SPMD, EXEC_GENERIC_SPMD = 1, 2, 3


@dataclass(frozen=True)
class GridValues:
    """A target's llvm::omp::GV values that the geometry reads, and the device's limits."""

    warp: int
    default_threads: int           # GV_Default_WG_Size
    default_teams: int             # GV_Default_Num_Teams
    max_block: int                 # threads per block the device allows
    max_grid: int                  # blocks per grid the device allows


def geometry(gv: GridValues, cfg: Config, exec_mode: int, kernel_max_threads: int,
             kernel_max_teams: int, num_teams: int, thread_limit: int,
             tripcount: int) -> tuple[int, int]:
    """(blocks, threads per block). Threads: the thread_limit clause (plus a warp for the
    main thread in generic mode) or the default, capped by the kernel
    (`kernel_max_threads`, 0: none) and OMP_TEAMS_THREAD_LIMIT. Blocks: the num_teams
    clause; else for a combined SPMD loop one thread per iteration, fewer threads per
    block (a power of two, down to LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT) when that
    gives fewer than the default team count; for a teams loop one block per iteration; at
    most the default team count unless LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT is
    false; never past the grid limit, OMP_NUM_TEAMS or the kernel's MaxTeams. A target
    region without teams (num_teams < 0) is one block."""
    max_threads = gv.max_block
    for cap in (kernel_max_threads, cfg.teams_thread_cap):
        if cap > 0:
            max_threads = min(max_threads, cap)
    from_user = thread_limit > 0
    threads = (thread_limit if from_user else gv.default_threads) + \
        (gv.warp if exec_mode == EXEC_GENERIC else 0)
    threads = max(1, min(threads, max_threads))
    block_limit = gv.max_grid
    for cap in (cfg.num_teams_cap, kernel_max_teams):
        if cap > 0:
            block_limit = min(block_limit, cap)
    if num_teams != 0:
        return (max(1, min(num_teams, block_limit)) if num_teams > 0 else 1), threads
    teams = gv.default_teams
    if tripcount <= 0:
        blocks = teams                                  # no loop: the default count
    elif exec_mode == EXEC_SPMD:
        low = min(cfg.min_threads_low_trip, threads)
        if tripcount < teams * threads and not from_user:
            if tripcount >= teams * low:                # enough teams: whole warps fewer
                threads = min(threads, 1 << (-(-tripcount // teams) - 1).bit_length())
            else:                                       # too few for either: both cut
                threads = max(1, low)
        blocks = (tripcount - 1) // threads + 1
    else:
        blocks = tripcount                              # one team per distribute iteration
    if cfg.reuse_blocks:
        blocks = min(blocks, teams)
    return max(1, min(blocks, block_limit)), threads


def checked_blocks(name: str, teams: int | None, threads: int | None, default_threads: int,
                   max_threads: int, max_blocks: int, shared_mem: int = 0,
                   max_shared: int | None = None) -> tuple[int, int]:
    """(blocks, threads per block) of a launch asked for `teams` x `threads` (None: one
    block, `default_threads`); INVALID_VALUE, naming the value and the limit, beyond
    `max_threads` per block (the kernel's and the device's), `max_blocks`, or
    `max_shared` bytes of dynamic shared memory."""
    grid, block = int(teams or 1), int(threads or default_threads)
    if not 1 <= block <= max_threads:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"kernel '{name}': {block} threads per block, expected 1 to "
                           f"{max_threads} (the kernel's and the device's limit)")
    if not 1 <= grid <= max_blocks:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"kernel '{name}': {grid} blocks, expected 1 to {max_blocks}")
    if max_shared is not None and shared_mem > max_shared:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"kernel '{name}': shared_mem={shared_mem} bytes, the device "
                           f"allows {max_shared}")
    return grid, block


def checked_workgroups(name: str, teams: int | None, threads: int | None,
                       default_threads: int, max_threads: int, max_items: int
                       ) -> tuple[int, int]:
    """(work-groups, work-items per group) of a launch, as checked_blocks, for a device
    whose grid limit counts work-items (HSA)."""
    wg, groups = int(threads or default_threads), int(teams or 1)
    if not 1 <= wg <= max_threads:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"kernel '{name}': {wg} threads per team, expected 1 to "
                           f"{max_threads} (the agent's and the kernel's maximum work-group "
                           f"size)")
    if groups < 1 or groups * wg > max_items:
        raise OffloadError(ErrorCode.INVALID_VALUE,
                           f"kernel '{name}': {groups} teams of {wg} threads, expected a "
                           f"grid of 1 to {max_items} work-items")
    return groups, wg

