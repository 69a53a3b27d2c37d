"""The CUDA plugin's rules for clang-19 nvptx OpenMP kernels (issue 18) that need no GPU:
the kernel environment's layout and LLVM 19's launch geometry."""
import ctypes
import dataclasses
import struct

import pytest

from offload import config
from offload.errors import OffloadError
from offload.plugins import _cuda_openmp as omp


class FakeDevice:
    max_block, max_grid = 1024, 2**31 - 1

    def __init__(self, **cfg):
        self.plugin = type("P", (), {"config": dataclasses.replace(config.Config(), **cfg)})()


def env(mode, max_threads=0, max_teams=0, red=0):
    raw = struct.pack("<BBBx6i", 1, 0, mode, 0, max_threads, 0, max_teams, red, 0) + bytes(20)
    return omp.KernelEnvironment.parse(raw)


def test_kernel_environment_layout():
    e = omp.KernelEnvironment.parse(struct.pack("<BBBx6i", 1, 1, 2, 1, 256, 2, 64, 8, 1024)
                                    + bytes(20))
    assert (e.exec_mode, e.min_threads, e.max_threads, e.min_teams, e.max_teams,
            e.reduction_data_size, e.reduction_buffer_length) == (2, 1, 256, 2, 64, 8, 1024)


def test_generic_mode_adds_a_warp_and_a_plain_target_is_one_block():
    d = FakeDevice()
    assert omp.geometry(d, env(omp.EXEC_GENERIC), -1, -1, 0) == (1, 128 + 32)
    assert omp.geometry(d, env(omp.EXEC_GENERIC), 0, 64, 0) == (3200, 64 + 32)  # the default
    assert omp.geometry(d, env(omp.EXEC_SPMD), -1, -1, 0) == (1, 128)


def test_clauses_trip_count_and_limits():
    d = FakeDevice()
    assert omp.geometry(d, env(omp.EXEC_SPMD), 7, 256, 0) == (7, 256)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 512, 100000) == (196, 512)  # ceil(1e5/512)
    assert omp.geometry(d, env(omp.EXEC_SPMD, max_teams=50), 0, -1, 100000) == (50, 32)
    assert omp.geometry(d, env(omp.EXEC_SPMD, max_threads=64), 0, 512, 0)[1] == 64
    assert omp.geometry(d, env(omp.EXEC_GENERIC), -1, -1, 0, kernel_max=128) == (1, 128)


# LLVM 19's GenericKernelTy::getNumBlocks for combined SPMD loops with no num_teams clause
# (offload/test/offloading/high_trip_count_block_limit.cpp): one thread per iteration up to
# 3200 teams, then teams reused; below 3200 full blocks, threads cut to a power of two, to
# LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT (32) at least, then teams too.
@pytest.mark.parametrize("trip, grid", [
    (819200, (3200, 128)),          # 6400 blocks wanted: capped, each thread takes two
    (10**9, (3200, 128)),
    (409600, (3200, 128)),          # exactly 3200 full blocks
    (409599, (3200, 128)),          # just under: ceil(409599/3200) = 128 threads
    (200000, (3125, 64)),           # ceil(200000/3200) = 63 -> 64 threads
    (102400, (3200, 32)),           # 3200 * 32: enough teams, 32 threads
    (102399, (3200, 32)),           # too few for teams of 32: both cut
    (1000, (32, 32)),
    (1, (1, 32)),
])
def test_spmd_trip_count_rules(trip, grid):
    assert omp.geometry(FakeDevice(), env(omp.EXEC_SPMD), 0, 0, trip) == grid


def test_thread_limit_from_the_user_is_kept_and_teams_still_capped():
    d = FakeDevice()
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 256, 819200) == (3200, 256)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 256, 1000) == (4, 256)


def test_reuse_blocks_off_gives_one_thread_per_iteration():
    d = FakeDevice(reuse_blocks=False)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 0, 819200) == (6400, 128)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 0, 10**9) == (7812500, 128)
    assert omp.geometry(d, env(omp.EXEC_GENERIC), 0, 0, 0) == (3200, 160)   # no loop


def test_min_threads_for_low_trip_count():
    d = FakeDevice(min_threads_low_trip=64)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 0, 1000) == (16, 64)
    d = FakeDevice(min_threads_low_trip=512)          # never more than the block has
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 0, 1000) == (8, 128)


def test_teams_loops_get_a_team_per_iteration():
    d = FakeDevice()
    for mode in (omp.EXEC_GENERIC, omp.EXEC_GENERIC_SPMD):
        assert omp.geometry(d, env(mode), 0, 0, 10)[0] == 10
        assert omp.geometry(d, env(mode), 0, 0, 10**6)[0] == 3200


def test_omp_num_teams_and_teams_thread_limit_cap():
    d = FakeDevice(num_teams_cap=100, teams_thread_cap=64)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, 0, 819200) == (100, 64)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 500, 1024, 0) == (100, 64)


@pytest.mark.parametrize("name, value, field, expected", [
    ("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "False", "reuse_blocks", False),
    ("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "1", "reuse_blocks", True),
    ("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", "64", "min_threads_low_trip", 64),
    ("OMP_NUM_TEAMS", "8", "num_teams_cap", 8),
    ("OMP_TEAMS_THREAD_LIMIT", "96", "teams_thread_cap", 96),
])
def test_geometry_variables_are_read(monkeypatch, name, value, field, expected):
    monkeypatch.setenv(name, value)
    assert getattr(config.read(), field) == expected


@pytest.mark.parametrize("name, value", [
    ("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "maybe"),
    ("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", "-3"),
    ("OMP_NUM_TEAMS", "many"),
])
def test_bad_geometry_values_are_named_in_python(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(OffloadError, match=name):
        config.read()


class ScratchDevice:
    """What launch_environment and give_back use of a CUDA device, recorded: device
    memory as numbered blocks, writes as (address, bytes)."""

    def __init__(self, fail_write=False, allocs_left=None):
        self.id, self.next, self.live, self.done = 0, 0x1000, set(), []
        self.fail_write = fail_write
        self.allocs_left = allocs_left          # then allocations run out (None: never)
        dev = self

        class Plugin:
            def data_submit(self, d, addr, host, n):
                if dev.fail_write:
                    raise OffloadError(omp.ErrorCode.BACKEND_FAILURE, "write failed")
                dev.done.append(("write", addr, ctypes.string_at(host, n)))
        self.plugin = Plugin()

    def alloc(self, n, kind):
        if self.allocs_left is not None:
            if self.allocs_left == 0:
                raise OffloadError(omp.ErrorCode.OUT_OF_RESOURCES, "out of device memory")
            self.allocs_left -= 1
        self.next += 0x1000
        self.live.add(self.next)
        return self.next

    def free(self, addr):
        self.live.remove(addr)


def test_a_reduction_gets_a_fresh_environment_every_launch():
    """LLVM 19 allocates a reducing kernel's launch environment and buffer per launch,
    writes the environment and leaves the buffer as allocated; offload keeps both, in one
    block, for the next launch of that size, writing ReductionCnt = ReductionIterCnt = 0
    and the buffer's address each time (no fill); two launches at once get two pairs;
    beyond _SCRATCH_KEPT of a size they are freed; a failed write gives its pair back."""
    dev = ScratchDevice()
    red = env(omp.EXEC_SPMD, red=8)
    addr, token = omp.launch_environment(dev, red, 4)
    assert token == (8, addr, token[2]) and dev.live == {token[2]}   # one block
    assert addr == token[2] + 8                                      # the buffer, then it
    assert dev.done == [("write", addr, struct.pack("<IIQ", 0, 0, token[2]))]
    second, other = omp.launch_environment(dev, red, 4)         # while the first runs
    assert second != addr and len(dev.live) == 2
    omp.give_back(dev, token)
    omp.give_back(dev, other)
    dev.done.clear()
    again, token = omp.launch_environment(dev, red, 4)          # a kept pair, rewritten
    assert again in (addr, second) and len(dev.live) == 2
    assert dev.done == [("write", again, struct.pack("<IIQ", 0, 0, token[2]))]
    omp.give_back(dev, token)
    tokens = [omp.launch_environment(dev, red, 4)[1] for _ in range(omp._SCRATCH_KEPT + 2)]
    for t in tokens:
        omp.give_back(dev, t)
    assert len(dev.live) == omp._SCRATCH_KEPT                    # the rest freed
    dev.fail_write = True
    with pytest.raises(OffloadError, match="write failed"):
        omp.launch_environment(dev, red, 4)
    assert len(dev.live) == omp._SCRATCH_KEPT                    # its pair kept, not lost
    plain, nothing = omp.launch_environment(ScratchDevice(), env(omp.EXEC_SPMD), 4)
    assert nothing is None and plain                             # the shared one


def test_the_cores_reduction_scratch_is_one_pair_per_stream_made_once():
    """launch_plan's ReductionScratch: for each copier stream an environment pointing at
    its own buffer (counters 0), right after it in one block, made once per buffer size; running out of memory part way leaves nothing allocated, and
    the next call makes it whole."""
    dev = ScratchDevice()
    got = omp._stream_scratch(dev, 64)
    assert len(got.environments) == len(got.buffers) == omp.COPIER_STREAMS and got.bytes == 64
    assert got.section == omp.BOUNCE_BYTES                       # a section's room after
    assert dev.live == set(got.buffers)
    assert [e - b for e, b in zip(got.environments, got.buffers, strict=True)] == \
        [64] * omp.COPIER_STREAMS
    assert dev.done == [("write", e, struct.pack("<IIQ", 0, 0, b))
                        for e, b in zip(got.environments, got.buffers, strict=True)]
    assert omp._stream_scratch(dev, 64) is got and len(dev.live) == omp.COPIER_STREAMS
    for left in range(omp.COPIER_STREAMS):
        short = ScratchDevice(allocs_left=left)
        with pytest.raises(OffloadError, match="out of device memory"):
            omp._stream_scratch(short, 64)
        assert short.live == set(), left
        short.allocs_left = None
        assert len(omp._stream_scratch(short, 64).environments) == omp.COPIER_STREAMS
