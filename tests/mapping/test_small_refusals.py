"""Item 7: the smaller ways to a silent wrong result or a crash, each now a
clear error naming the value (or, for an int passed to a C char, accepted as C does)."""
import ctypes
import re
import os
import subprocess
import sys

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = "void f(char c, long n, int *out) { out[0] = c + (int)n; }\n"


@pytest.fixture
def m(rt):
    return offload.compile_c(SRC)


def test_an_int_for_a_char_is_converted_as_c_does(m):
    out = np.zeros(1, np.int32)
    for c, expected in ((65, 66), (b"A", 66), (-1, 0), (255, 0)):
        offload.target(m.f, c, 1, out, device=0)
        assert out[0] == expected, c        # 255 is the char -1 (x86's char is signed)


@pytest.mark.parametrize("args, param", [((300, 1), "parameter 0 (char)"),
                                         ((65, 2**70), "parameter 1 (long)"),
                                         ((65, -2**63 - 1), "parameter 1 (long)")])
def test_an_integer_out_of_range_names_its_parameter(m, args, param):
    out = np.zeros(1, np.int32)
    offload.target(m.f, 65, 1, out, device=0)       # the argument kinds, accepted once
    with pytest.raises(OffloadError, match=re.escape(param) + ".*expected an integer in") as e:
        offload.target(m.f, *args, out, device=0)
    assert e.value.code is ErrorCode.INVALID_ARGUMENT


def test_a_prototype_that_declares_a_variable_is_an_offload_error(rt):
    m = offload.compile_c("int counter = 3;\nvoid f(int *a) { a[0] = counter; }\n")
    b = m.binaries[0]
    img = offload.load_image(b.data, prototypes={"counter": "extern int counter;",
                                                 "f": "void f(int *a);"})
    with pytest.raises(OffloadError, match="declares no function") as e:
        offload.target(img.counter, np.zeros(1, np.int32), device=0)
    assert e.value.code is ErrorCode.INVALID_ARGUMENT


def test_locking_unmapped_memory_reports_the_mlock(rt, capfd):
    page = (ctypes.c_char * 4096).from_address(0x10000)     # below any mapping
    with pytest.raises(OffloadError, match=r"^mlock\(0x10000, 4096\) failed.*not mapped") as e:
        offload.lock(np.frombuffer(page, np.uint8), device=0)
    assert e.value.code is ErrorCode.OUT_OF_RESOURCES
    assert offload.llvm_omp_target_lock_mem(0x10000, 4096, 0) == 0
    err = capfd.readouterr().err
    assert "omptarget error: mlock(0x10000" in err and "munlock" not in err
    assert offload.testing.state()["pins"]["host"]["entries"] == 0


def test_omp_target_free_of_a_host_array_names_the_initial_device(rt, capfd):
    a = np.zeros(16)
    initial = offload.omp_get_initial_device()
    offload.omp_target_free(a, initial)
    err = capfd.readouterr().err
    assert f"omp_target_alloc gave for the initial device ({initial})" in err
    assert a.tolist() == [0.0] * 16


def test_a_device_array_is_a_kernel_pointer_argument_on_the_host(m):
    a = np.zeros(4, np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        offload.target(m.f, 1, 2, offload.device_array(a, 0), device=0)
        assert a[0] == 0                                  # written on the device copy
    assert a.tolist() == [3, 0, 0, 0]


def test_host_plugin_copies_only_through_addresses_it_knows(rt, capfd):
    """On the host plugin a device address in no allocation and no mapping is refused
    (LLVM's host plugin copies through it and crashes); allocated, mapped and associated
    memory still copy."""
    a = np.arange(16, dtype=np.int32)
    initial = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy(0x12345678, a, 64, 0, 0, 0, initial) == -1
    assert "is in no allocation and no mapping of device 0" in capfd.readouterr().err
    assert offload.omp_target_memcpy(a, 0x12345678, 64, 0, 0, initial, 0) == -1
    d = offload.omp_target_alloc(64, 0)
    assert offload.omp_target_memcpy(d, a, 64, 0, 0, 0, initial) == 0
    other = np.zeros(16, np.int32)
    assert offload.omp_target_associate_ptr(other, d, 64, 0, 0) == 0
    back = np.zeros(16, np.int32)
    mapped = offload.omp_get_mapped_ptr(other, 0)
    assert offload.omp_target_memcpy(back, mapped, 64, 0, 0, initial, 0) == 0
    assert back.tolist() == list(range(16))
    assert offload.omp_target_disassociate_ptr(other, 0) == 0
    offload.omp_target_free(d, 0)


def test_unlocking_freed_memory_by_address_leaves_no_entry(rt):
    buf = np.zeros(1 << 14, np.uint8)
    p = buf.ctypes.data
    assert offload.llvm_omp_target_lock_mem(p, buf.nbytes, 0) == p
    del buf
    offload.llvm_omp_target_unlock_mem(p, 0)
    assert offload.testing.state()["pins"]["host"]["entries"] == 0


DAEMONS = r"""
import sys, threading, time
import numpy as np
import offload
def work():
    a = np.zeros(1 << 12, np.uint8)
    while True:
        try:
            with offload.locked(a, device=0):
                with offload.target_data(offload.tofrom(a), device=0):
                    pass
        except offload.OffloadError as e:
            if e.code is not offload.ErrorCode.UNINITIALIZED:
                sys.stderr.write(f"OTHER {e}\n")
            return
for _ in range(4):
    threading.Thread(target=work, daemon=True).start()
time.sleep(0.02)
"""


def test_daemon_threads_at_exit_get_only_the_uninitialized_refusal(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT,
                                                              os.environ.get("PYTHONPATH")])))
    for _ in range(10):
        res = subprocess.run([sys.executable, "-c", DAEMONS], capture_output=True, text=True,
                             env=env, timeout=120, cwd=tmp_path)
        assert res.returncode == 0 and "OTHER" not in res.stderr and \
            "Traceback" not in res.stderr, res.stderr[-2000:]
