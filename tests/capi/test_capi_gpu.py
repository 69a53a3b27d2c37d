"""Clang-19 nvptx programs on offload's libomptarget.so.19.1 on an NVIDIA GPU.
tests/capi/*.c built for sm_90 (scripts/build-capi-gpu.sh on a machine with clang-19 and
the CUDA toolkit; OFFLOAD_NVPTX_PROGRAMS names the directory) must print what LLVM 19's own
runtime prints for the same programs offloaded to the host (device counts aside: the GPU
machine has its GPUs, LLVM's host plugin four devices). Skipped, with the reason, without
a CUDA device or the built programs."""
import glob
import os
import subprocess

import pytest

from tests.cuda_faults_support import NUM, WHY

PROGRAMS = os.path.abspath(os.environ["OFFLOAD_NVPTX_PROGRAMS"]) \
    if os.environ.get("OFFLOAD_NVPTX_PROGRAMS") else ""
HAVE = bool(PROGRAMS) and os.path.isdir(os.path.join(PROGRAMS, "nvptx"))
pytestmark = [
    pytest.mark.skipif(NUM == 0, reason=f"no CUDA device: {WHY}"),
    pytest.mark.skipif(not HAVE, reason="no nvptx programs: build them with "
                       "scripts/build-capi-gpu.sh and set OFFLOAD_NVPTX_PROGRAMS"),
]
NAMES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PROGRAMS, "nvptx", "*")))


def _comparable(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith("num devices")]


@pytest.fixture(scope="module")
def lib():
    from offload.capi import libdir
    return libdir()


def _run(lib, exe, cwd="/tmp"):
    """A built program on offload's library (and the carried libomp), LIBOMPTARGET_* and
    OFFLOAD_* cleared."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
    env["LD_LIBRARY_PATH"] = f"{lib}:{os.path.abspath(PROGRAMS)}"
    return subprocess.run([exe], capture_output=True, text=True, env=env, timeout=300,
                          cwd=cwd)


# known failures, left open (none now; kept for the next one found)
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    reason=KNOWN[n], strict=True)) if n in KNOWN else n for n in NAMES])
def test_nvptx_program_prints_what_the_host_run_prints(lib, name):
    res = _run(lib, os.path.join(PROGRAMS, "nvptx", name))
    with open(os.path.join(PROGRAMS, "expected", name + ".txt")) as f:
        expected = f.read()
    rc = res.returncode if res.returncode >= 0 else 128 - res.returncode   # as the shell
    got = res.stdout + f"rc={rc}\n"
    assert _comparable(got) == _comparable(expected), res.stderr[-2000:]


def test_ompt_tool_hears_the_gpu_as_the_host(lib):
    """tests/capi/ompt_emi.c for sm_90: an OMPT tool hears on the GPU the callbacks LLVM 19
    gives it for the host run (device numbers as this machine has them; each device's kind
    is its architecture, sm_90 on an H200, where LLVM's host plugin says generic-64bit)."""
    exe = os.path.join(PROGRAMS, "ompt", "ompt_emi")
    if not os.path.exists(exe):
        pytest.skip("ompt/ompt_emi not built (scripts/build-capi-gpu.sh)")
    res = _run(lib, exe)
    assert res.returncode == 0, res.stderr[-2000:]
    with open(os.path.join(PROGRAMS, "ompt", "expected.txt")) as f:
        host = f.read().splitlines()
    expected = []
    for line in host:                     # LLVM's host run: four devices, initial device 4
        if line.startswith(("device_initialize", "device_finalize")):
            dev = int(line.split("dev=")[1].split()[0])
            if dev >= NUM:
                continue
            line = line.replace("type=generic-64bit", "type=sm_90")
        expected.append(line.replace("/4 ", f"/{NUM} "))
    assert res.stdout.splitlines() == expected


def test_kernels_recorded_and_replayed_on_the_gpu(lib, tmp_path):
    """tests/capi/record_replay_beyond_llvm.c.in for sm_90: each launch recorded (LLVM's
    files, the block reserved in device memory), and each recording replayed by
    `python -m offload.capi.replay --verify` to the same device memory."""
    import json
    import sys
    exe = os.path.join(PROGRAMS, "ompt", "record_replay")
    if not os.path.exists(exe):
        pytest.skip("ompt/record_replay not built (scripts/build-capi-gpu.sh)")
    res = _run(lib, exe, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[1:] == ["a[0]=113 a[5]=13"]
    recorded = sorted(p for p in os.listdir(tmp_path) if p.endswith(".json"))
    assert len(recorded) == 2
    for name in recorded:
        with open(tmp_path / name) as f:
            assert json.load(f)["DeviceMemorySize"] > 0
        got = subprocess.run([sys.executable, "-m", "offload.capi.replay", "--verify",
                              str(tmp_path / name)], capture_output=True, text=True,
                             timeout=300)
        assert (got.returncode, got.stdout.strip()) == (0, "replay device memory verified"), \
            got.stderr[-2000:]


# tests/capi/gpu/launch_geometry.c: the teams and threads of each loop under LLVM 19's
# getNumThreads/getNumBlocks (tests/plugins/cuda/test_cuda_openmp.py has the rules one by one)
GEOMETRY = {
    (): ["high 3200 128", "mid 3125 64", "low 32 32", "thread_limit 3200 256",
         "distribute 10", "teams 3200"],
    (("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "False"),):
        ["high 6400 128", "mid 3125 64", "low 32 32", "thread_limit 3200 256",
         "distribute 10", "teams 3200"],
    (("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", "64"),):
        ["high 3200 128", "mid 3125 64", "low 16 64", "thread_limit 3200 256",
         "distribute 10", "teams 3200"],
    (("OMP_NUM_TEAMS", "100"), ("OMP_TEAMS_THREAD_LIMIT", "64")):
        ["high 100 64", "mid 100 64", "low 32 32", "thread_limit 100 64",
         "distribute 10", "teams 100"],
}


@pytest.mark.parametrize("extra", list(GEOMETRY), ids=lambda e: ",".join(f"{k}={v}" for k, v in e)
                         or "default")
def test_launch_geometry_is_llvm_19s(lib, extra):
    exe = os.path.join(PROGRAMS, "gpu", "launch_geometry")
    if not os.path.exists(exe):
        pytest.skip("gpu/launch_geometry not built (scripts/build-capi-gpu.sh)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
    env.update(extra)
    env["LD_LIBRARY_PATH"] = f"{lib}:{os.path.abspath(PROGRAMS)}"
    res = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=300, cwd="/tmp")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == GEOMETRY[extra]


def test_regions_on_mapped_data_launch_in_one_compiled_step(lib, tmp_path):
    """tests/capi/present_regions.c on the GPU, its regions on shared data run by one
    thread (several may find the core's streams taken, and launch in Python): each region
    whose list lies on mapped data is marked, translated, launched and waited for by the
    compiled core (launch_present_map, with the kernel's launch environment first), the
    first launch of each through _on_present and the later ones from what it kept
    (hot_regions, _run_kept), neither through the Python launch (_run_kernel); the
    output up to the threads' is the host's."""
    res, stats = _profiled(lib, tmp_path, "present_regions", "1")
    with open(os.path.join(PROGRAMS, "expected", "present_regions.txt")) as f:
        expected = f.read()
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[:2] == expected.splitlines()[:2]
    assert res.stdout.splitlines()[3] == "slots: 200 0 0 0"
    def calls(module):
        return {key[2]: (value[1], value[4]) for key, value in stats.items()
                if key[0].endswith(os.path.join("capi", module))}
    kernels = calls("kernels.py")
    # each region's first launch through _on_present, its later ones from what it kept
    # (_run_kept): 5 + 3 + 200 in all
    kept = kernels.get("_run_kept", (0,))[0]
    assert kernels["_on_present"][0] + kept >= 208 and kept >= 199, kernels
    # the Python launch only for the regions the general rules took (_run_with_args), never
    # for one on mapped data (_on_present's `launch`, when the core's launch was refused)
    callers = {k[2] for k in kernels.get("_run_kernel", (0, {}))[1]}
    assert "launch" not in callers, callers


def test_reductions_on_mapped_data_launch_in_the_compiled_core(lib, tmp_path):
    """tests/capi/reduce_on_mapped.c on the GPU, one thread: each Dot-shaped region maps
    its scalar (the first through _on_present, the rest from what it kept), then the
    compiled core launches the reducing kernel with a copier
    stream's own launch environment and buffer, zeroed on that stream first
    (ReductionScratch), so the Python launch (_cuda_openmp.launch, a fresh environment
    per launch) never runs; from the second region on (a pooled block of its size there)
    the core maps, sends, brings back and unmaps the scalar too (accel_c/section.c), so
    Region.single_range runs for the first alone; every sum is right."""
    res, stats = _profiled(lib, tmp_path, "reduce_on_mapped", "0")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == ["one thread: 200 of 200 right"]
    python_launches = [v[1] for k, v in stats.items()
                       if k[0].endswith("_cuda_openmp.py") and k[2] == "launch"]
    regions = {k[2]: v[1] for k, v in stats.items()            # first run, then kept
               if k[0].endswith(os.path.join("capi", "kernels.py"))
               and k[2] in ("_on_present", "_run_kept")}
    assert sum(python_launches) == 0, python_launches
    assert regions.get("_on_present", 0) + regions.get("_run_kept", 0) >= 200, regions
    assert regions.get("_run_kept", 0) >= 199, regions
    in_python = [v[1] for k, v in stats.items()
                 if k[0].endswith(os.path.join("mapping", "region.py"))
                 and k[2] == "single_range"]
    assert sum(in_python) <= 2, in_python


def _profiled(lib, tmp_path, name, *args):
    """(the run, its cProfile stats: (file, line, function) -> (.., callers)) of nvptx
    program `name` on offload's library under OFFLOAD_CAPI_PROFILE."""
    import pstats
    exe = os.path.join(PROGRAMS, "nvptx", name)
    if not os.path.exists(exe):
        pytest.skip(f"nvptx/{name} not built (scripts/build-capi-gpu.sh)")
    prof = str(tmp_path / "capi.prof")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "LIBOMPTARGET"))}
    env.update(OFFLOAD_CAPI_PROFILE=prof, LD_LIBRARY_PATH=f"{lib}:{os.path.abspath(PROGRAMS)}")
    res = subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=300,
                         cwd="/tmp")
    return res, (pstats.Stats(prof).stats if os.path.exists(prof) else {})
