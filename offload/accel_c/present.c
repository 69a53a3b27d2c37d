/* Part of the accelerator (offload/accel_c/accel.c includes it): a region's arguments on
 * mapped data (present, launch_present) and release_busy (release). */

static PyObject *release_list(Accel *a, PyObject *entries);
static PyTypeObject *PresentArgsType;     /* PresentArgs(kernel_args, marked), made at start */

/* The first half of _target_on_present (see target.py) over the tuple `given`: each exact
 * numpy array argument must be C-contiguous and share a byte with a made mapping: that
 * entry is marked in use (once per argument) and the argument becomes its device address;
 * exact ints and floats pass as they are. 1 with *kargs_out and *marked_out (new lists); 0
 * with nothing marked for anything else (the Python path decides); -1 with an exception. */
static int mark_present(Accel *a, PyObject *given, PyObject **kargs_out,
                        PyObject **marked_out) {
  Py_ssize_t count = PyTuple_GET_SIZE(given);
  if (a->core->observed)                         /* INFO bits or a listener */
    return 0;
  PyObject *kargs = PyList_New(count), *marked = PyList_New(0);
  if (!kargs || !marked) {
    Py_XDECREF(kargs);
    Py_XDECREF(marked);
    return -1;
  }
  uintptr_t addr[64];
  Py_ssize_t size[64];
  int any = 0;
  for (Py_ssize_t i = 0; i < count; i++) {           /* outside the lock: the buffers */
    PyObject *x = PyTuple_GET_ITEM(given, i);
    if (Py_TYPE(x) == (PyTypeObject *)ndarray_type) {
      int ro;
      if (i >= 64 || whole_array_buffer(x, 0, &addr[i], &size[i], &ro) < 0 || !addr[i])
        goto none;
      any = 1;
    } else if (PyLong_CheckExact(x) || PyFloat_CheckExact(x)) {
      Py_INCREF(x);
      PyList_SET_ITEM(kargs, i, x);
    } else {
      goto none;                              /* numpy scalars, subclasses, objects */
    }
  }
  if (!any)
    goto none;
  if (!try_table_lock(a))
    goto none;
  for (Py_ssize_t i = 0; i < count; i++) {
    if (PyList_GET_ITEM(kargs, i))
      continue;
    uintptr_t p = addr[i], begin, tgt;
    Py_ssize_t n = size[i] > 0 ? size[i] : 1;
    int inside;
    PyObject *e = core_find(a->core, p, (uintptr_t)n, &inside);   /* sharing a byte */
    PyObject *dev_addr = NULL;
    int ok = e && IS_ENTRY(e) && made(F(e, READY)) && as_addr(F(e, HST_BEGIN), &begin) &&
             as_addr(F(e, TGT_BEGIN), &tgt) &&
             (dev_addr = PyLong_FromUnsignedLongLong((unsigned long long)(tgt + (p - begin)))) &&
             PyList_Append(marked, e) == 0;
    if (ok && entry_mark(e) < 0) {
      PyList_SetSlice(marked, PyList_GET_SIZE(marked) - 1, PyList_GET_SIZE(marked), NULL);
      ok = 0;
    }
    if (!ok) {
      Py_XDECREF(dev_addr);
      PyErr_Clear();
      for (Py_ssize_t m = 0; m < PyList_GET_SIZE(marked); m++)     /* undo */
        entry_unmark(PyList_GET_ITEM(marked, m));
      if (PyList_GET_SIZE(marked))
        core_wake(a->core);
      PyErr_Clear();
      give_table_lock(a);
      goto none;
    }
    PyList_SET_ITEM(kargs, i, dev_addr);
  }
  give_table_lock(a);
  *kargs_out = kargs;
  *marked_out = marked;
  return 1;
none:
  PyErr_Clear();
  Py_DECREF(kargs);
  Py_DECREF(marked);
  return 0;
}

/* present(args) -> PresentArgs(kernel_args, marked), the entries marked in use (given back
 * by release), or None with nothing marked (mark_present). */
static PyObject *Accel_present(Accel *a, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  if (kwnames || PyVectorcall_NARGS(nargsf) != 1 || !PyTuple_Check(args[0]) || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "present(args: tuple)");
    return NULL;
  }
  PyObject *kargs, *marked;
  int got = mark_present(a, args[0], &kargs, &marked);
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_None);
  PyObject *r = PyStructSequence_New(PresentArgsType);
  if (!r) {
    Py_XDECREF(release_list(a, marked));          /* the marks given back, the error kept */
    Py_DECREF(kargs);
    Py_DECREF(marked);
    return NULL;
  }
  PyStructSequence_SetItem(r, 0, kargs);
  PyStructSequence_SetItem(r, 1, marked);
  return r;
}

/* launch_present(args, spec) -> bool: as present(args), and the kernel of `spec` (a
 * LaunchSpec) launched here on the arguments, its marks given back: True once it ran;
 * False with nothing done (the Python path launches). */
static PyObject *Accel_launch_present(Accel *a, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
  if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || !PyTuple_Check(args[0]) ||
      args[1] == Py_None || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "launch_present(args: tuple, spec: LaunchSpec)");
    return NULL;
  }
  PyObject *kargs, *marked;
  int got = mark_present(a, args[0], &kargs, &marked);
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_False);
  int ran = launch_now(a, args[1], kargs);
  PyObject *typ = NULL, *err = NULL, *tb = NULL;
  if (ran < 0)
    PyErr_Fetch(&typ, &err, &tb);
  PyObject *r = release_list(a, marked);
  Py_DECREF(kargs);
  Py_DECREF(marked);
  if (ran < 0) {
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(typ, err, tb);
    return NULL;
  }
  if (!r)
    return NULL;
  Py_DECREF(r);
  return Py_NewRef(ran ? Py_True : Py_False);    /* 0: released, the Python path launches */
}

/* release(entries): MappingTable.release_busy. */
static PyObject *Accel_release(Accel *a, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  if (kwnames || PyVectorcall_NARGS(nargsf) != 1 || !PyList_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "release(entries: list)");
    return NULL;
  }
  return release_list(a, args[0]);
}

static PyObject *release_list(Accel *a, PyObject *entries) {
  if (wait_table_lock(a) < 0)                                        /* blocking, as Python */
    return NULL;
  int bad = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries) && !bad; i++)
    bad = entry_unmark(PyList_GET_ITEM(entries, i)) < 0;
  bad = core_wake(a->core) < 0 || bad;
  give_table_lock(a);
  if (bad)
    return NULL;
  Py_RETURN_NONE;
}
