"""Plugin manager, device-memory API, host plugin, ELF images."""
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from offload.plugins.common import AllocKind
from tests.harness import run_threads

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_offload_info_lists_host_and_says_why_gpus_have_none():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("OFFLOAD_PLUGINS", None)
    out = subprocess.run([sys.executable, "-m", "offload.cli"], capture_output=True,
                         text=True, env=env, check=True).stdout
    assert "plugin host: 1 device(s)" in out
    assert "host CPU" in out
    for gpu in ("cuda", "amdgpu"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"plugin {gpu}:"))
        if "no devices" in line:
            assert len(line.split("no devices:", 1)[1].strip()) > 10   # a reason is given


def test_gpu_plugins_come_before_host(runtime):
    m = runtime(OFFLOAD_PLUGINS="")
    names = [r.name for r in m.records]
    assert names.index("cuda") < names.index("host")
    assert names.index("amdgpu") < names.index("host")
    m = runtime(OFFLOAD_PLUGINS="host,cuda")
    assert [r.name for r in m.records] == ["host", "cuda"]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_round_trip_alloc_memcpy_kernel(rt, add_one, dtype):
    n = 1000
    a = (np.arange(n) * 3).astype(dtype)
    d = offload.omp_target_alloc(a.nbytes, 0)
    assert d != 0
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy(d, a, a.nbytes, 0, 0, 0, init) == 0
    if dtype == np.int32:
        offload.target(add_one.add_one, d, 0, n, device=0)
        expect = a + 1
    elif dtype == np.int64:
        offload.target(add_one.inc64, d, n, device=0)
        expect = a + 1
    else:
        offload.target(add_one.scale, d, n, 0.5, device=0)
        expect = a * 0.5
    out = np.zeros_like(a)
    assert offload.omp_target_memcpy(out, d, a.nbytes, 0, 0, init, 0) == 0
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(a, (np.arange(n) * 3).astype(dtype))   # host untouched
    offload.omp_target_free(d, 0)


def test_memcpy_between_devices_and_offsets(rt):
    a = np.arange(64, dtype=np.uint8)
    d0 = offload.omp_target_alloc(64, 0)
    d1 = offload.omp_target_alloc(64, 1)
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy(d0, a, 64, 0, 0, 0, init) == 0
    assert offload.omp_target_memcpy(d1, d0, 32, 0, 16, 1, 0) == 0
    out = np.zeros(32, np.uint8)
    assert offload.omp_target_memcpy(out, d1, 32, 0, 0, init, 1) == 0
    np.testing.assert_array_equal(out, a[16:48])
    offload.omp_target_free(d0, 0)
    offload.omp_target_free(d1, 1)


def test_memcpy_rect_3d_subblock_equals_numpy_slice(rt):
    src = np.arange(6 * 7 * 8, dtype=np.float32).reshape(6, 7, 8)
    init = offload.omp_get_initial_device()
    d = offload.omp_target_alloc(src.nbytes, 0)
    assert offload.omp_target_memcpy(d, src, src.nbytes, 0, 0, 0, init) == 0
    out = np.full((3, 4, 5), -1, np.float32)
    rc = offload.omp_target_memcpy_rect(out, d, 4, 3, [3, 4, 5], [0, 0, 0], [2, 1, 3],
                                        list(out.shape), list(src.shape), init, 0)
    assert rc == 0
    np.testing.assert_array_equal(out, src[2:5, 1:5, 3:8])
    # host -> device sub-block, then back whole
    blk = np.ones((2, 2, 2), np.float32) * 99
    assert offload.omp_target_memcpy_rect(d, blk, 4, 3, [2, 2, 2], [1, 1, 1], [0, 0, 0],
                                          list(src.shape), [2, 2, 2], 0, init) == 0
    back = np.zeros_like(src)
    offload.omp_target_memcpy(back, d, src.nbytes, 0, 0, init, 0)
    expect = src.copy()
    expect[1:3, 1:3, 1:3] = 99
    np.testing.assert_array_equal(back, expect)
    assert offload.omp_target_memcpy_rect(None, None, 4, 3, [], [], [], [], [], 0, 0) \
        == offload.INT_MAX
    offload.omp_target_free(d, 0)


def test_associate_and_mapped_ptr(rt):
    a = np.zeros(16, np.int32)
    d = offload.omp_target_alloc(a.nbytes + 64, 0)
    assert offload.omp_target_is_present(a, 0) == 0
    assert offload.omp_target_associate_ptr(a, d, a.nbytes, 64, 0) == 0
    assert offload.omp_target_is_present(a, 0) == 1
    assert offload.omp_get_mapped_ptr(a, 0) == d + 64
    assert offload.omp_get_mapped_ptr(a.ctypes.data + 8, 0) == d + 72
    # a mapping on top of an association adds nothing and frees nothing
    with offload.target_data(offload.tofrom(a), device=0):
        assert offload.omp_get_mapped_ptr(a, 0) == d + 64
    assert offload.omp_target_is_present(a, 0) == 1
    assert offload.omp_target_disassociate_ptr(a, 0) == 0
    assert offload.omp_target_is_present(a, 0) == 0
    assert offload.omp_target_disassociate_ptr(a, 0) == -1
    offload.omp_target_free(d, 0)


def test_initial_device_and_accessibility(rt):
    init = offload.omp_get_initial_device()
    assert init == offload.omp_get_num_devices() == 2
    assert offload.omp_is_initial_device() == 1
    a = np.zeros(4)
    assert offload.omp_target_is_present(a, init) == 1
    assert offload.omp_target_is_present(a, offload.omp_initial_device) == 1
    assert offload.omp_get_mapped_ptr(a, init) == a.ctypes.data
    assert offload.omp_target_is_accessible(a, a.nbytes, 0) == 1   # host devices share memory
    p = offload.omp_target_alloc(32, init)
    assert p != 0
    offload.omp_target_free(p, init)
    offload.omp_set_default_device(1)
    assert offload.omp_get_default_device() == 1


def test_alloc_kinds(rt):
    for alloc, free in ((offload.llvm_omp_target_alloc_device, offload.llvm_omp_target_free_device),
                        (offload.llvm_omp_target_alloc_shared, offload.llvm_omp_target_free_shared),
                        (offload.llvm_omp_target_alloc_host, offload.llvm_omp_target_free_host)):
        p = alloc(4096, 0)
        assert p
        free(p, 0)


# ---- bad input -------------------------------------------------------------------
@pytest.mark.parametrize("bad", [3, 100, -3, -2, offload.omp_invalid_device])
def test_device_number_out_of_range_raises(rt, bad):
    for call in (lambda: offload.omp_target_alloc(8, bad),
                 lambda: offload.llvm_omp_target_lock_mem(np.zeros(4), 32, bad),
                 lambda: offload.llvm_omp_target_unlock_mem(np.zeros(4), bad),
                 lambda: offload.omp_target_free(1234, bad)):
        with pytest.raises(OffloadError) as ei:
            call()
        assert ei.value.code is ErrorCode.INVALID_VALUE
        assert f"device number '{bad}' out of range, only 2 devices available" in str(ei.value)


def _elf_header(cls: int, machine: int, etype: int = 3) -> bytes:
    """A minimal ELF header (no sections) for a foreign machine."""
    if cls == 64:
        ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
        return ident + struct.pack("<HHIQQQIHHHHHH", etype, machine, 1, 0, 0, 0, 0, 64, 0, 0,
                                   64, 0, 0)
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    return ident + struct.pack("<HHIIIIIHHHHHH", etype, machine, 1, 0, 0, 0, 0, 52, 0, 0, 40,
                               0, 0)


@pytest.mark.parametrize("cls,machine,what", [(64, 183, "EM_AARCH64"), (32, 3, "ELF32"),
                                              (64, 62, "ET_EXEC")])
def test_image_for_another_machine_is_refused(rt, cls, machine, what):
    data = _elf_header(cls, machine, etype=2 if what == "ET_EXEC" else 3)
    img = offload.load_image(data, prototypes="void k(void);")
    with pytest.raises(OffloadError) as ei, pytest.warns(offload.OffloadWarning, match=what):
        offload.target(img.k, device=0)        # falls back (said), and the host refuses too
    assert ei.value.code is ErrorCode.INVALID_BINARY
    os.environ["OMP_TARGET_OFFLOAD"] = "mandatory"
    try:
        plugin = offload.runtime.current().manager.get_device(0).plugin
        with pytest.raises(OffloadError, match=what):
            plugin.check_binary(img.binaries[0])
    finally:
        del os.environ["OMP_TARGET_OFFLOAD"]


def test_real_foreign_elf_from_compiler_is_refused(rt, tmp_path):
    """A 32-bit x86 object, if the compiler can make one, is a real foreign ELF."""
    src = tmp_path / "k.c"
    src.write_text("void k(void) {}\n")
    out = tmp_path / "k32.o"
    if subprocess.run(["cc", "-m32", "-c", str(src), "-o", str(out)],
                      capture_output=True).returncode != 0:
        pytest.skip("cc cannot target -m32 here")
    img = offload.load_image(out, prototypes="void k(void);")
    plugin = offload.runtime.current().manager.get_device(0).plugin
    with pytest.raises(OffloadError, match="ELF32"):
        plugin.check_binary(img.binaries[0])


def test_non_elf_image():
    with pytest.raises(OffloadError) as ei:
        offload.load_image(b"#!/bin/sh\necho hi\n")
    assert ei.value.code is ErrorCode.INVALID_BINARY
    assert "neither ELF nor PTX" in str(ei.value)
    with pytest.raises(OffloadError) as ei:
        offload.load_image(b"\x7fELF\x02\x01garbage")
    assert ei.value.code is ErrorCode.INVALID_BINARY


def test_unknown_kernel_name(add_one):
    with pytest.raises(OffloadError) as ei:
        add_one.no_such_kernel
    assert ei.value.code is ErrorCode.NOT_FOUND
    assert "add_one" in str(ei.value)


def test_wrong_number_of_kernel_arguments(rt, add_one):
    d = offload.omp_target_alloc(40, 0)
    with pytest.raises(OffloadError) as ei:
        offload.target(add_one.add_one, d, 0, device=0)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    assert "takes 3 argument(s)" in str(ei.value) and "2 given" in str(ei.value)
    offload.omp_target_free(d, 0)


def test_null_pointers_and_zero_sizes(rt, capsys):
    init = offload.omp_get_initial_device()
    assert offload.omp_target_alloc(0, 0) == 0
    assert offload.omp_target_alloc(-5, 0) == 0
    assert offload.omp_target_memcpy(0, np.zeros(4), 8, 0, 0, 0, init) == -1
    assert offload.omp_target_memcpy(np.zeros(4), 0, 8, 0, 0, init, 0) == -1
    assert offload.omp_target_memcpy(0, 0, 0, 0, 0, 0, init) == 0     # nothing to copy
    assert offload.llvm_omp_target_lock_mem(0, 64, 0) == 0
    assert offload.llvm_omp_target_lock_mem(np.zeros(4), 0, 0) == 0
    offload.omp_target_free(0, 0)                                       # free(NULL): no-op
    err = capsys.readouterr().err
    assert err.count("omptarget error:") == 4
    assert "NULL" in err and "size must be positive" in err


def test_free_of_unknown_pointer(rt, capsys):
    d = offload.omp_target_alloc(64, 0)
    offload.omp_target_free(d + 8, 0)
    assert "is not memory allocated" in capsys.readouterr().err
    dev = offload.runtime.current().manager.get_device(0)
    assert dev.is_device_memory(d)                 # the real allocation is untouched
    offload.omp_target_free(d, 0)
    assert not dev.is_device_memory(d)
    offload.omp_target_free(d, 0)                  # double free: error, no crash
    assert "is not memory allocated" in capsys.readouterr().err


def test_offload_disabled_has_zero_devices_but_initial_device_works(runtime, add_one):
    runtime(OMP_TARGET_OFFLOAD="disabled")
    assert offload.omp_get_num_devices() == 0
    assert offload.omp_get_initial_device() == 0
    assert offload.omp_get_default_device() == 0
    a = np.arange(10, dtype=np.int32)
    offload.target(add_one.add_one, a, 0, 10, map=[offload.tofrom(a)])
    np.testing.assert_array_equal(a, np.arange(10) + 1)
    p = offload.omp_target_alloc(16, 0)
    assert p != 0
    offload.omp_target_free(p, 0)
    with pytest.raises(OffloadError, match="out of range, only 0 devices"):
        offload.omp_target_alloc(16, 1)


def test_bad_environment_value_is_named(runtime):
    with pytest.raises(OffloadError, match="OMP_TARGET_OFFLOAD='sometimes'"):
        runtime(OMP_TARGET_OFFLOAD="sometimes")


def test_compile_c_caches_by_content(rt, tmp_path):
    src = "int twice(int x) { return 2 * x; }\n"
    a = offload.compile_c(src, cache_dir=str(tmp_path))
    b = offload.compile_c(src, cache_dir=str(tmp_path))
    assert a.binaries[0].path == b.binaries[0].path
    assert a.binaries[0].prototypes["twice"] == "int twice(int x);"
    with pytest.raises(OffloadError, match="compile_c failed"):
        offload.compile_c("this is not C", cache_dir=str(tmp_path))


def test_threads_alloc_copy_free(rt):
    init = offload.omp_get_initial_device()

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(1000):
            n = int(rng.integers(1, 4096))
            a = rng.integers(0, 255, n, dtype=np.uint8)
            d = offload.omp_target_alloc(n, 0)
            assert d
            assert offload.omp_target_memcpy(d, a, n, 0, 0, 0, init) == 0
            out = np.empty_like(a)
            assert offload.omp_target_memcpy(out, d, n, 0, 0, init, 0) == 0
            assert np.array_equal(a, out)
            offload.omp_target_free(d, 0)

    run_threads(work, [(i,) for i in range(8)])
    assert offload.testing.state()["devices"][0]["allocations"] == 0


def test_device_memory_pool_reuses_same_size_and_gives_back_on_oom(recording):
    """A plugin with a pool: freed memory serves the next allocation of the same size;
    an allocation that runs out of memory first empties the pool, then retries."""
    dev = offload.runtime.current().manager.get_device(0).generic
    dev.pool.limit = 8192
    a = dev.alloc(4096, AllocKind.DEVICE)
    dev.free(a)
    assert dev.allocation(a) is None                       # freed as far as users go
    assert dev.alloc(4096, AllocKind.DEVICE) == a          # ... and reused
    assert len(recording.of("alloc")) == 1
    b = dev.alloc(1000, AllocKind.DEVICE)
    assert b != a
    dev.free(a)
    dev.free(b)
    assert recording.of("free") == []                      # both kept
    big = dev.alloc(100000, AllocKind.DEVICE)
    dev.free(big)                                          # over the limit: really freed
    assert [c[1] for c in recording.of("free")] == [big]
    assert offload.testing.state()["devices"][0]["allocations"] == 0
    recording.fail_allocs = 1
    c = dev.alloc(50000, AllocKind.DEVICE)
    assert sorted(x[1] for x in recording.of("free")[1:]) == sorted([a, b])
    assert dev.pool.bytes == 0
    dev.free(c)


def test_cuda_argument_buffers_pack_only_what_fits_unsigned():
    """The CUDA plugin's reused argument buffers: one 8-byte slot per parameter, ints
    packed little-endian; anything else (a negative int, a float, a numpy scalar, a wrong
    count, a parameter wider than 8 bytes) is left to the general packing (no GPU needed)."""
    from offload.plugins.args import ArgSlots
    from offload.plugins.cuda import _ffi
    bufs = ArgSlots([8, 4, 8], _ffi)
    held = bufs.fill([2**64 - 1, 7, 5])
    buf, params, _ = held
    assert [buf[i] for i in range(3)] == [2**64 - 1, 7, 5]
    assert int(_ffi.cast("uintptr_t", params[2])) - int(_ffi.cast("uintptr_t", buf)) == 16
    bufs.free.append(held)
    assert bufs.fill([1, 2, 3]) is held                  # the buffer is reused
    bufs.free.append(held)
    for bad in ([-1, 2, 3], [1.0, 2, 3], [np.int64(1), 2, 3], [1, 2], [1, 2**32, 3]):
        assert bufs.fill(bad) is None, bad
    assert bufs.free == [held]                           # a refused call keeps none
    assert ArgSlots([16], _ffi).fill([1]) is None and ArgSlots([], _ffi).fill([]) is None


def test_numpy_scalars_as_kernel_arguments(runtime):
    """numpy scalars pass by value, as Python numbers do."""
    runtime()
    k = offload.compile_c("void fill(float *a, float v, int n) "
                          "{ for (int i = 0; i < n; i++) a[i] = v; }")
    a = np.zeros(8, np.float32)
    offload.target(k.fill, a, np.float32(2.5), np.int32(5), map=[offload.tofrom(a)], device=0)
    np.testing.assert_array_equal(a, [2.5] * 5 + [0] * 3)


def test_kernel_scalar_packing():
    """How GPU plugins lay out scalar kernel arguments (no GPU needed)."""
    from offload.plugins.common import pack_scalar
    assert pack_scalar(5, 8, "a") == (5).to_bytes(8, "little")
    assert pack_scalar(-1, 4, "a") == b"\xff\xff\xff\xff"
    assert pack_scalar(0x7F12_3456_7890, 8, "a") == (0x7F12_3456_7890).to_bytes(8, "little")
    assert pack_scalar((1 << 63) + 1, 8, "a") == ((1 << 63) + 1).to_bytes(8, "little")
    assert pack_scalar(1.5, 4, "a") == np.float32(1.5).tobytes()
    assert pack_scalar(1.5, 8, "a") == np.float64(1.5).tobytes()
    assert pack_scalar(b"abc", 3, "a") == b"abc"
    with pytest.raises(OffloadError, match="cannot pass float as 2 bytes"):
        pack_scalar(1.0, 2, "a")
    with pytest.raises(OffloadError, match="pass bytes for aggregates"):
        pack_scalar(1, 12, "a")
