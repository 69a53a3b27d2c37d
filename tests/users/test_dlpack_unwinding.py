"""A DLPack view dropped while an exception propagates (docs/semantics.md): numpy frees a
view left on the value stack as the exception unwinds, calling the tensor's deleter (or a
capsule nobody consumed its destructor) with the exception pending. Python code run
there took that exception for its own: the deleter's first call raised SystemError,
cffi dropped both, and the interpreter went on unwinding nothing (a segmentation fault;
found by test_interrupt_checkpoints once its injector raised where CPython does, after
the CALL that made the view). The entries are now C (offload/accel_c/dlpack.c) keeping
the exception; each case runs in a child process, as a crash is what it guards against."""
import subprocess
import sys
import textwrap

import pytest

from offload import _accel, dlpack

PRELUDE = """
import sys
import numpy as np
import offload
from offload import dlpack

a = np.arange(1 << 12, dtype=np.int32)

def fail(exc):
    raise exc

def check(make, exc):
    try:
        with offload.target_data(offload.tofrom(a), device=0):
            print(make(), fail(exc))
    except type(exc) as got:
        assert got is exc, repr(got)
        assert got.__context__ is None and got.__cause__ is None, repr(got.__context__)
    else:
        raise AssertionError("no exception")
    assert not dlpack._alive, dlpack._alive
    assert not offload.omp_target_is_present(a, 0)
"""


def _run(body, runtime):
    runtime()
    res = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    return res


@pytest.mark.parametrize("exc", ["ValueError('the caller')", "KeyboardInterrupt()"])
def test_a_view_freed_as_an_exception_unwinds_leaves_it_unchanged(runtime, exc):
    res = _run(f"""
        for _ in range(3):
            check(lambda: np.from_dlpack(offload.device_array(a, 0)), {exc})
        print("OK")
    """, runtime)
    assert res.stdout.split() == ["OK"] and "Exception ignored" not in res.stderr


@pytest.mark.parametrize("version", ["(1, 0)", "None"])
def test_a_capsule_nobody_consumed_freed_as_an_exception_unwinds(runtime, version):
    res = _run(f"""
        for _ in range(3):
            check(lambda: offload.device_array(a, 0).__dlpack__(max_version={version}),
                  ValueError("the caller"))
        print("OK")
    """, runtime)
    assert res.stdout.split() == ["OK"] and "Exception ignored" not in res.stderr


def test_a_deleter_that_raises_is_reported_and_the_exception_kept(runtime):
    """What the Python half of the deleter raises is unraisable (reported, not raised
    into the consumer's deallocation), and the unwinding exception reaches the caller."""
    res = _run("""
        seen = []
        sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)
        release = dlpack._release
        def broken(address):
            release(address)
            raise RuntimeError("in the deleter")
        dlpack._release = broken
        check(lambda: np.from_dlpack(offload.device_array(a, 0)), ValueError("the caller"))
        assert seen == ["RuntimeError"], seen
        print("OK")
    """, runtime)
    assert res.stdout.split() == ["OK"]


def test_capsules_carry_the_compiled_entries(runtime):
    """Where the compiled module builds (as here and in CI, whatever OFFLOAD_ACCEL
    selects for the tables), capsules carry the C entries, not the Python callbacks."""
    runtime()
    assert _accel.load() is not None
    versioned, legacy, destroy = dlpack._Entries.get()
    python = dlpack._ffi.cast("uintptr_t", dlpack._delete_versioned)
    assert dlpack._ffi.cast("uintptr_t", versioned) != python
    assert int(dlpack._ffi.cast("uintptr_t", versioned)) == \
        int(dlpack._ffi.cast("uintptr_t", legacy))
    import ctypes
    assert destroy != ctypes.cast(dlpack._DESTROY, ctypes.c_void_p).value
    assert "C entries" in dlpack.describe_entries()


def test_without_the_compiled_module_the_python_callbacks_release(runtime, monkeypatch):
    """The fallback where no compiler builds the module (not reached otherwise): capsules
    carry the cffi deleters and the ctypes destructor, which release what a capsule kept
    once its consumer is done or nobody consumed it."""
    import ctypes

    import numpy as np

    import offload
    runtime()
    python = (dlpack._delete_versioned, dlpack._delete_legacy,
              ctypes.cast(dlpack._DESTROY, ctypes.c_void_p).value)
    monkeypatch.setattr(dlpack._Entries, "got", python)
    a = np.arange(64, dtype=np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        before = len(dlpack._alive)
        for version in ((1, 0), None):
            cap = offload.device_array(a, 0).__dlpack__(max_version=version)
            assert len(dlpack._alive) == before + 1
            name, ctype, fn = ((b"dltensor_versioned", "DLManagedTensorVersioned *",
                                python[0]) if version else
                               (b"dltensor", "DLManagedTensor *", python[1]))
            managed = dlpack._ffi.cast(ctype, dlpack._get_pointer_obj(cap, name))
            assert managed.deleter == fn                 # the Python callback, not C
            del cap                                    # never consumed: the destructor
            assert len(dlpack._alive) == before
        v = np.from_dlpack(offload.device_array(a, 0))
        assert len(dlpack._alive) == before + 1 and v[3] == 3
        del v                                          # consumed: the deleter
        assert len(dlpack._alive) == before


THREAD_CALLER = r"""
#include <pthread.h>
typedef void (*deleter_t)(void *);
struct call { deleter_t fn; void *arg; };
static void *run(void *p) { struct call *c = p; c->fn(c->arg); return 0; }
int call_in_new_thread(deleter_t fn, void *arg) {
  struct call c = {fn, arg};
  pthread_t t;
  if (pthread_create(&t, 0, run, &c)) return -1;
  return pthread_join(t, 0);
}
"""


def test_a_consumer_thread_python_never_saw_runs_the_deleter(runtime, tmp_path):
    """A consumer may free from a thread of its own (a C library's worker, never a Python
    thread): the C deleter takes the GIL there and releases what the capsule kept."""
    import ctypes

    import numpy as np

    import offload
    runtime()
    src, lib = tmp_path / "caller.c", tmp_path / "caller.so"
    src.write_text(THREAD_CALLER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread",
                    "-o", str(lib), str(src)], check=True)
    caller = ctypes.CDLL(str(lib)).call_in_new_thread      # releases the GIL meanwhile
    caller.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    a = np.arange(64, dtype=np.int32)
    with offload.target_data(offload.tofrom(a), device=0):
        before = len(dlpack._alive)
        cap = offload.device_array(a, 0).__dlpack__(max_version=(1, 0))
        address = dlpack._get_pointer_obj(cap, b"dltensor_versioned")
        managed = dlpack._ffi.cast("DLManagedTensorVersioned *", address)
        deleter = int(dlpack._ffi.cast("uintptr_t", managed.deleter))
        set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_SetName", ctypes.pythonapi))       # a prototype of our own
        assert set_name(cap, b"used_dltensor_versioned") == 0          # consumed
        assert caller(deleter, address) == 0
        assert len(dlpack._alive) == before
        del cap                                    # consumed: its destructor does nothing
        assert len(dlpack._alive) == before
