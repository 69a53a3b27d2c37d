"""The CUDA plugin's rules for clang-19 nvptx OpenMP kernels (issue 18) that need no GPU:
the kernel environment's layout and LLVM 19's launch geometry."""
import struct

from offload.plugins import _cuda_openmp as omp


class FakeDevice:
    max_block, max_grid = 1024, 2**31 - 1

    def _attr(self, name):
        assert name == "multiprocessors"
        return 132


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
    assert omp.geometry(d, env(omp.EXEC_GENERIC), 0, 64, 0) == (132, 64 + 32)   # one per SM
    assert omp.geometry(d, env(omp.EXEC_SPMD), -1, -1, 0) == (1, 128)


def test_clauses_trip_count_and_limits():
    d = FakeDevice()
    assert omp.geometry(d, env(omp.EXEC_SPMD), 7, 256, 0) == (7, 256)
    assert omp.geometry(d, env(omp.EXEC_SPMD), 0, -1, 100000) == (782, 128)  # ceil(1e5/128)
    assert omp.geometry(d, env(omp.EXEC_SPMD, max_teams=50), 0, -1, 100000) == (50, 128)
    assert omp.geometry(d, env(omp.EXEC_SPMD, max_threads=64), 0, 512, 0)[1] == 64
    assert omp.geometry(d, env(omp.EXEC_GENERIC), -1, -1, 0, kernel_max=128) == (1, 128)
