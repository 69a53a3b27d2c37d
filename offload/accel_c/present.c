/* Part of the accelerator (offload/accel_c/accel.c includes it): a region's arguments on
 * mapped data (present) and release_busy (release). */

/* present(args) -> (kernel arguments, entries) or None: _target_on_present's first half
 * (see target.py). Each exact numpy array argument must be C-contiguous and share a byte
 * with a made mapping: that entry is marked in use (once per argument) and the argument
 * becomes its device address; exact ints and floats pass as they are. None, with
 * nothing marked, for anything else (the Python path decides). */
static PyObject *release_list(Accel *a, PyObject *entries);

static PyObject *Accel_present(Accel *a, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames || nargs < 1 || nargs > 2 || !PyTuple_Check(args[0]) || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "present(args: tuple, launch=None)");
    return NULL;
  }
  PyObject *spec = nargs > 1 && args[1] != Py_None ? args[1] : NULL;
  PyObject *given = args[0];
  Py_ssize_t count = PyTuple_GET_SIZE(given);
  if (a->core->observed)                         /* INFO bits or a listener */
    Py_RETURN_NONE;
  PyObject *kargs = PyList_New(count), *marked = PyList_New(0);
  if (!kargs || !marked) {
    Py_XDECREF(kargs);
    Py_XDECREF(marked);
    return NULL;
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
  if (spec) {                          /* and the launch, here: True once it ran */
    int ran = launch_now(a, spec, kargs);
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
    if (ran == 0)
      Py_RETURN_NONE;                  /* released: the Python path launches */
    Py_RETURN_TRUE;
  }
  return Py_BuildValue("(NN)", kargs, marked);
none:
  PyErr_Clear();
  Py_DECREF(kargs);
  Py_DECREF(marked);
  Py_RETURN_NONE;
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
