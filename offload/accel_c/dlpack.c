/* The C entry points offload hands to DLPack consumers (offload/dlpack.py): a managed
 * tensor's deleter and a capsule's destructor. A consumer may call them from a
 * deallocation while an exception propagates (numpy drops a view on the value stack as
 * KeyboardInterrupt unwinds): Python code run then sees that exception as its own, and
 * losing it leaves the interpreter unwinding nothing (a crash). So each entry saves the
 * thread's exception, calls the Python function dlpack_setup gave it with its argument's
 * address, reports anything that function raises as unraisable, and puts the exception
 * back. Included by accel.c. */

static PyObject *dl_release;     /* release(managed tensor's address) */
static PyObject *dl_destroy;     /* destroy(capsule's address) */

static void dl_call(PyObject *fn, void *arg) {
  if (!Py_IsInitialized())
    return;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (fn) {
    PyObject *r = PyObject_CallFunction(fn, "K", (unsigned long long)(uintptr_t)arg);
    if (r)
      Py_DECREF(r);
    else
      PyErr_WriteUnraisable(fn);
  }
  PyErr_Restore(type, value, tb);
  PyGILState_Release(g);
}

static void dl_deleter(void *managed) { dl_call(dl_release, managed); }

static void dl_capsule_destructor(PyObject *capsule) { dl_call(dl_destroy, capsule); }

/* dlpack_setup(release, destroy) -> (deleter's address, capsule destructor's address) */
static PyObject *dlpack_setup(PyObject *self, PyObject *args) {
  PyObject *release, *destroy;
  if (!PyArg_ParseTuple(args, "OO:dlpack_setup", &release, &destroy))
    return NULL;
  if (!PyCallable_Check(release) || !PyCallable_Check(destroy)) {
    PyErr_SetString(PyExc_TypeError, "dlpack_setup(release, destroy): two callables");
    return NULL;
  }
  Py_XSETREF(dl_release, Py_NewRef(release));
  Py_XSETREF(dl_destroy, Py_NewRef(destroy));
  return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)dl_deleter,
                       (unsigned long long)(uintptr_t)dl_capsule_destructor);
}
