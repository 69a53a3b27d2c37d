"""The compile cache, plugins, malformed input, work in flight keeping its
memory, taskwait per thread, and the 16-thread stress run."""
import os
import random
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from tests.hardening_support import PAGE, STRESS_S, env_with_path, k, pins, totals  # noqa: F401 - k: a fixture
from tests.harness import background, run_threads

from tests.conftest import page_aligned, vmlck_kb

# ---- 4. the compile cache --------------------------------------------------------------------------
SRC = "int answer(void) { return 42; }\nvoid put(int *a) { a[0] = answer(); }\n"


def test_cache_directory_is_private(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(d))
    offload.compile_c(SRC)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    os.chmod(d, 0o770)
    with pytest.raises(OffloadError, match=r"OFFLOAD_CACHE_DIR=.*writable by group or "
                                           r"others \(mode 770\)"):
        offload.compile_c(SRC)
    os.chmod(d, 0o700)
    if os.geteuid() == 0:
        os.chown(d, 65534, 65534)
        with pytest.raises(OffloadError, match=r"OFFLOAD_CACHE_DIR=.*owned by uid 65534"):
            offload.compile_c(SRC)
        os.chown(d, 0, 0)
    f = tmp_path / "a-file"
    f.write_text("")
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(f / "sub"))
    with pytest.raises(OffloadError, match="OFFLOAD_CACHE_DIR=.*not usable"):
        offload.compile_c(SRC)


def test_planted_symlink_is_not_followed(tmp_path, monkeypatch, rt):
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(tmp_path))
    offload.compile_c(SRC)
    (target,) = [p for p in tmp_path.iterdir() if p.suffix == ".so"]
    other = offload.compile_c("void put(int *a) { a[0] = 666; }\n")
    evil = tmp_path / "evil.so"
    evil.write_bytes(other.binaries[0].data)
    target.unlink()
    target.symlink_to(evil)
    a = np.zeros(1, np.int32)
    offload.target(offload.compile_c(SRC).put, a, device=0)
    assert a[0] == 42
    assert not target.is_symlink()                 # replaced by a fresh compile


def test_key_covers_included_files_and_flags(tmp_path, monkeypatch, rt):
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(tmp_path / "cache"))
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "v.h").write_text("#define V 1\n")
    src = '#include "v.h"\nvoid put(int *a) { a[0] = V; }\n'
    a = np.zeros(1, np.int32)
    offload.target(offload.compile_c(src, flags=("-O2", f"-I{inc}")).put, a, device=0)
    assert a[0] == 1
    (inc / "v.h").write_text("#define V 2\n")
    offload.target(offload.compile_c(src, flags=("-O2", f"-I{inc}")).put, a, device=0)
    assert a[0] == 2
    offload.target(offload.compile_c(src, flags=("-O1", f"-I{inc}", "-DV_UNUSED")).put, a,
                   device=0)
    assert a[0] == 2


COMPILE_SCRIPT = "import offload; k = offload.compile_c({src!r}); print(k.kernels)"


def test_sixteen_processes_compile_one_kernel(tmp_path):
    env = env_with_path(OFFLOAD_CACHE_DIR=str(tmp_path / "cache"))
    code = COMPILE_SCRIPT.format(src="void same(int *a) { a[0] = 7; }\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(16)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        assert "same" in out
    cache = tmp_path / "cache"
    leftovers = [p.name for p in cache.iterdir() if not p.name.endswith(".so") and
                 p.name != "ffi"]                     # (ffi/: offload/ffi_cache.py's modules)
    leftovers += [p.name for p in (cache / "ffi").iterdir() if not p.name.endswith(".py") and
                  p.name != "__pycache__"]
    assert leftovers == []


def test_loaded_bytes_are_the_checked_bytes(rt):
    """Host images are loaded from anonymous memory files holding the bytes that were
    parsed, never from a path someone could swap."""
    k = offload.compile_c("void memfd_probe(int *a) { a[0] = 5; }\n")
    a = np.zeros(1, np.int32)
    offload.target(k.memfd_probe, a, device=0)
    assert a[0] == 5
    maps = open("/proc/self/maps").read()
    assert "memfd:offload-" in maps


# ---- 5. plugins ---------------------------------------------------------------------------------------
def test_entry_point_cannot_replace_a_builtin(monkeypatch, capsys, runtime):
    from importlib import metadata

    from offload import plugin_manager
    fake = [metadata.EntryPoint("host", "evil.module:Plugin", plugin_manager.ENTRY_POINT_GROUP),
            metadata.EntryPoint("mine", "tests.fakes.recording:RecordingPlugin",
                                plugin_manager.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: fake)
    found, clashes = plugin_manager.discover()
    assert found["host"] == plugin_manager.BUILTIN["host"] and "mine" in found
    assert len(clashes) == 1 and "evil.module:Plugin" in clashes[0] and "built-in" in clashes[0]
    runtime(OFFLOAD_PLUGINS="host")
    from offload import cli
    cli.main([])
    assert "warning: entry point host = evil.module:Plugin" in capsys.readouterr().out


# ---- 6. malformed input ------------------------------------------------------------------------------
def test_unusable_variables_name_themselves(runtime, monkeypatch):
    with pytest.raises(OffloadError, match="OFFLOAD_HOST_NUM_DEVICES=100000 is out of range"):
        runtime(OFFLOAD_HOST_NUM_DEVICES=100000)
    offload.shutdown()
    monkeypatch.setenv("OFFLOAD_HOST_NUM_DEVICES", "1")
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", "/proc/version/x")
    with pytest.raises(OffloadError, match="OFFLOAD_CACHE_DIR"):
        offload.compile_c("void f(void) {}")


def test_initial_device_errors_name_it(rt):
    with pytest.raises(OffloadError, match="initial device"):
        offload.lock(np.zeros(8), device=offload.omp_get_initial_device())


def _mutants(data: bytes, count: int, seed: int):
    rng = random.Random(seed)
    size = len(data)
    for i in range(count):
        b = bytearray(data)
        how = i % 5
        if how == 0:                                   # a few random bytes
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(size)] = rng.randrange(256)
        elif how == 1:                                 # the ELF and section headers
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(min(size, 64))] = rng.randrange(256)
            shoff = int.from_bytes(b[0x28:0x30], "little") if size > 0x30 else 0
            if 0 < shoff < size:
                for _ in range(rng.randint(1, 6)):
                    b[min(size - 1, shoff + rng.randrange(512))] = rng.randrange(256)
        elif how == 2:                                 # truncated
            b = b[:rng.randrange(1, size)]
        elif how == 3:                                 # a block of junk
            at = rng.randrange(size)
            b[at:at + 64] = bytes(rng.randrange(256) for _ in range(64))
        else:                                          # 32-bit fields set to extremes
            at = rng.randrange(0, size - 4) & ~3
            b[at:at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\0\0\0\x80", b"\x01\0\0\0"])
        yield bytes(b)


def parse_everything(data: bytes) -> None:
    """Every way offload reads an image without running it; only OffloadError may leave."""
    from offload import config, targets
    from offload.plugins.amdgpu import AMDGPUPlugin
    from offload.plugins.cuda import CUDAPlugin
    from offload.plugins.host import HostPlugin
    cfg = config.Config()
    try:
        img = offload.load_image(data, prototypes="void k(int *a, long n);")
        b = img.binaries[0]
        b.kernel_names()
        b.describe()
        for plugin in (HostPlugin(cfg), CUDAPlugin(cfg), AMDGPUPlugin(cfg)):
            plugin.is_valid_binary(b)
        if b.elf is not None and b.elf.machine == "EM_AMDGPU":
            from offload.plugins.amdgpu import metadata_param
            for meta in targets.kernel_metadata(b.data).values():
                for arg in meta.get(".args", []):
                    metadata_param(arg)
    except OffloadError:
        pass


def handmade_cubin() -> bytes:
    """A small, well-formed EM_CUDA ELF (sm_90, ABI version 8) with a symbol table."""
    import struct
    shstr = b"\0.shstrtab\0.strtab\0.symtab\0.text.k\0.nv.info\0"
    strtab = b"\0k\0"
    text = b"\0" * 32
    info = b"\x04\x0a\x08\x00" + b"\0" * 8
    sym = struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0) + struct.pack("<IBBHQQ", 1, 0x12, 0, 4, 0, 32)
    body = [shstr, strtab, sym, text, info]
    off, offs = 64, []
    for part in body:
        offs.append(off)
        off += len(part)
    shoff = (off + 7) & ~7
    names = [1, 11, 19, 27, 35]
    types = [3, 3, 2, 1, 0x70000000]
    sh = [b"\0" * 64]
    for i, part in enumerate(body):
        link = 2 if types[i] == 2 else 0
        info_ = 1 if types[i] == 2 else 0
        entsize = 24 if types[i] == 2 else 0
        sh.append(struct.pack("<IIQQQQIIQQ", names[i], types[i], 0, 0, offs[i], len(part),
                              link, info_, 1, entsize))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33, 8]) + b"\0" * 7
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0x5a00, 64, 0, 0,
                                 64, len(sh), 1)
    data = header + b"".join(body)
    return data + b"\0" * (shoff - len(data)) + b"".join(sh)


def test_handmade_cubin_is_a_cubin():
    from offload.targets import cubin_sm
    b = offload.load_image(handmade_cubin()).binaries[0]
    assert b.elf.machine == "EM_CUDA" and "k" in b.elf.functions
    assert cubin_sm(b.elf.flags, b.elf.abiversion) == 90


@pytest.mark.parametrize("kind", ["host", "cubin"])
def test_fuzzed_images_give_offload_errors(kind, k):
    """At least 500 mutants of each image kind built here: only OffloadError escapes.
    (AMDGPU code objects: tests/plugins/amdgpu/test_amdgpu.py.)"""
    data = k.binaries[0].data if kind == "host" else handmade_cubin()
    deadline = time.monotonic() + 120
    n = 0
    for mutant in _mutants(data, 600, seed=len(data)):
        parse_everything(mutant)
        n += 1
        if time.monotonic() > deadline:
            break
    assert n >= 500


# ---- 7. work in flight keeps its memory ------------------------------------------------------------
def test_leaving_a_data_region_waits_for_nowait_updates(rt):
    a = np.ones(16 << 20, np.uint8)                     # big: the copies take a while
    for _ in range(20):
        with pytest.raises(RuntimeError):
            with offload.target_data(offload.tofrom(a), device=0):
                h = offload.target_update(from_=[a], to=[a], device=0, nowait=True)
                raise RuntimeError("leave at once")
        h.wait()
    assert totals() == (0, 0)


def test_delete_during_a_nowait_target_waits_for_its_kernel(rt, k):
    flag = np.zeros(1, np.int32)
    offload.target_enter_data(offload.to(flag), device=0)
    h = offload.target(k.spin, flag, device=0, nowait=True)
    dev_flag = offload.omp_get_mapped_ptr(flag, 0)
    table = offload.runtime.current().device(0).table
    deadline = time.monotonic() + 60                   # the region has begun (OpenMP gives
    while table.lookup(flag.ctypes.data, 4).busy == 0:  # no order without a dependence)
        assert time.monotonic() < deadline
        time.sleep(0.001)
    deleter = background(offload.target_exit_data, offload.delete(flag), device=0)
    deleter.join(0.2)
    assert deleter.is_alive() and not h.done()         # the exit waits for the kernel
    one = np.ones(1, np.int32)
    assert offload.omp_target_memcpy(dev_flag, one, 4, 0, 0, 0,
                                     offload.omp_get_initial_device()) == 0
    h.wait()
    deleter.join(60)
    assert not deleter.is_alive() and totals() == (0, 0)


# ---- 8. taskwait is per thread ------------------------------------------------------------------------
def test_taskwait_waits_for_the_calling_threads_work_only(rt, k):
    flag = np.zeros(1, np.int32)
    offload.target_enter_data(offload.to(flag), device=0)
    dev_flag = offload.omp_get_mapped_ptr(flag, 0)
    mine = offload.target(k.spin, flag, device=0, nowait=True)
    failing = []

    def other():
        failing.append(offload.target_update(to=[offload.to(np.zeros(3), present=True)],
                                             device=0, nowait=True))
        with pytest.raises(OffloadError, match="present"):
            offload.taskwait()                           # its own error ...

    run_threads(other, [()])
    assert not mine.done()                               # ... and it did not wait for ours
    one = np.ones(1, np.int32)
    offload.omp_target_memcpy(dev_flag, one, 4, 0, 0, 0, offload.omp_get_initial_device())
    offload.taskwait()                                   # ours, without the other's error
    assert mine.done()
    offload.target_exit_data(offload.delete(flag), device=0)


# ---- the stress run ---------------------------------------------------------------------------------
def mixed_stress(seconds, devices, kernel, seed=0, args=lambda a: (a, a.size), extra=None):
    """16 threads of mixed operations for `seconds`; returns the operation count.
    `args(a)` gives the kernel's arguments for array a; `extra` keywords for target."""
    extra = extra or (lambda a: {})
    counts = [0] * 16

    def work(i):
        rng = random.Random(seed * 100 + i)
        arrays = [page_aligned(rng.randint(1, 4) * PAGE, np.int32) for _ in range(3)]
        held = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            a = rng.choice(arrays)
            dev = rng.choice(devices)
            op = rng.randrange(7)
            try:
                if op == 0:
                    held.append(offload.lock(a, device=dev))
                elif op == 1 and held:
                    held.pop().unlock()
                elif op == 2:
                    with offload.locked(a, device=dev):
                        offload.target(kernel, *args(a), map=[offload.tofrom(a)], device=dev,
                                       **extra(a))
                elif op == 3:
                    with offload.target_data(offload.to(a[: a.size // 2]), device=dev):
                        offload.target_update(from_=[a[: a.size // 2]], device=dev)
                elif op == 4:
                    h = offload.target(kernel, *args(a), device=dev, nowait=True, **extra(a))
                    h.wait()
                elif op == 5:
                    d = offload.omp_target_alloc(a.nbytes, dev)
                    offload.omp_target_memcpy(d, a, a.nbytes, 0, 0, dev,
                                              offload.omp_get_initial_device())
                    offload.omp_target_free(d, dev)
                else:
                    offload.target_enter_data(offload.to(a), device=dev)
                    offload.target_exit_data(offload.from_(a), device=dev)
            except OffloadError as exc:
                # another thread pinned an overlapping range of the same array
                assert exc.code is ErrorCode.INVALID_ARGUMENT, exc
            counts[i] += 1
        for p in held:
            p.unlock()

    run_threads(work, [(i,) for i in range(16)], timeout=seconds + 300)
    return sum(counts)


def test_sixteen_threads_mixed_stress_host_async_queues(runtime, k):
    """The same mix on host queues that run on worker threads (OFFLOAD_HOST_ASYNC=1):
    every copy, kernel and fill goes through a queue, as on a GPU."""
    runtime(OFFLOAD_HOST_ASYNC=1, OFFLOAD_HOST_NUM_DEVICES=2)
    assert vmlck_kb() == 0
    n = mixed_stress(min(STRESS_S, 15), [0, 1], k.add_one, seed=3)
    assert n > 200
    assert totals() == (0, 0) and pins()["entries"] == 0
    offload.shutdown()
    assert vmlck_kb() == 0


def test_sixteen_threads_mixed_stress_host(rt, k):
    """16 threads, STRESS_S seconds (OFFLOAD_STRESS_SECONDS, default 60), then VmLck back
    to 0 and no device allocation left."""
    assert vmlck_kb() == 0
    n = mixed_stress(STRESS_S, [0, 1], k.add_one)
    assert n > 1000
    assert totals() == (0, 0) and pins()["entries"] == 0
    assert vmlck_kb() == 0
    offload.shutdown()
    assert vmlck_kb() == 0
