"""LLVM 19's launch geometry for clang OpenMP kernels (GenericKernelTy::getNumThreads and
getNumBlocks; offload/test/offloading/high_trip_count_block_limit.cpp): the rule, common
to every GPU plugin; a plugin gives its grid values and the kernel's limits."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Config

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
