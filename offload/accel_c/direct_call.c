/* Part of the accelerator (offload/accel_c/accel.c includes it after present.c): a C-ABI
 * kernel region whose kernel is called directly (the host: GenericDevice.omp_direct_call),
 * on mapped data, or with its one plain section mapped nowhere mapped around the call as
 * Region.single_range maps it (the compiled twin of capi/kernels.py's _present with a
 * direct call). */

#define MAP_TO_FROM 0x3ULL

/* maps.single_section's rule in C (the table's `observed` asked apart): a non-empty array
 * section from its base with no bit but TO, FROM and TARGET_PARAM. */
static int plain_section(uintptr_t base, uintptr_t begin, int64_t size, uint64_t type) {
  return base == begin && size > 0 && !(type & ~(MAP_TO_FROM | MAP_TARGET_PARAM));
}

static PyObject *call_on_section(Accel *a, PyObject *const *args, PyObject *absent,
                                 Py_ssize_t want);

/* `call` on the region's arguments `kargs` when they are `want` of them: 1 once it ran, 0
 * (not called), -1 with its exception. */
static int call_with(PyObject *call, PyObject *kargs, Py_ssize_t want) {
  if (PyList_GET_SIZE(kargs) != want)
    return 0;
  PyObject *r = PyObject_Vectorcall(call, PySequence_Fast_ITEMS(kargs), (size_t)want, NULL);
  Py_XDECREF(r);
  return r ? 1 : -1;
}

/* call_present_map(n, bases, begins, sizes, types, mappers, call, nargs) -> True, False,
 * None or the one component to map first: as present_map, then `call` (the region's
 * kernel called directly) on its arguments, its marks given back: True once it ran; False
 * with nothing done when the arguments are not `nargs` of them (the caller launches). On
 * host memory a list whose one component mapped nowhere is a plain section (from its
 * base, some bytes, no bit but TO, FROM and TARGET_PARAM) has it mapped first and
 * unmapped after (call_on_section); elsewhere that component comes back, nothing done. */
static PyObject *Accel_call_present_map(Accel *a, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames) {
  Py_ssize_t want;
  if (kwnames || PyVectorcall_NARGS(nargsf) != 8 || !PyLong_CheckExact(args[7]) ||
      (want = PyLong_AsSsize_t(args[7])) < 0) {
    PyErr_SetString(PyExc_TypeError, "call_present_map(n, bases, begins, sizes, types, "
                    "mappers, call, nargs): a count, five addresses, a callable, a count");
    return NULL;
  }
  PyObject *kargs, *marked, *absent;
  int got = mark_map(a, args, NULL, &kargs, &marked, &absent, NULL);
  if (got == 2 && a->copier.kind == COPY_MEMCPY)
    return call_on_section(a, args, absent, want);
  if (got == 2)
    return absent;
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_None);
  return launched(a, call_with(args[6], kargs, want), kargs, marked);
}

/* Region.single_range over `absent` (present_map's (base, begin, size, type), reference
 * taken) around the list run as call_present_map runs it: begin_single_range of its
 * TO/FROM bits, the list marked again and called, end_single_range (no copy back unless it
 * ran). True once it ran; False (the section unmapped) when the list is no longer on
 * mapped data or the arguments are not `want`; `absent` itself, nothing done, for a
 * component that is not a plain section; NULL with the call's or a step's exception. */
static PyObject *call_on_section(Accel *a, PyObject *const *args, PyObject *absent,
                                 Py_ssize_t want) {
  unsigned long long base, begin;
  long long size, type;
  if (!PyArg_ParseTuple(absent, "KKLL", &base, &begin, &size, &type)) {
    Py_DECREF(absent);
    return NULL;
  }
  if (!plain_section((uintptr_t)base, (uintptr_t)begin, size, (uint64_t)type))
    return absent;                                /* not a plain section: the caller's */
  PyObject *busy = PyList_New(0), *p = PyLong_FromUnsignedLongLong(begin),
           *n = PyLong_FromLongLong(size), *t = PyLong_FromLongLong(type & MAP_TO_FROM);
  PyObject *result = NULL;
  if (!busy || !p || !n || !t)
    goto out;
  PyObject *begin_args[6] = {p, n, t, Py_None, Py_False, busy};
  PyObject *tgt = Accel_begin(a, begin_args, 6, NULL);
  if (!tgt)
    goto out;
  Py_DECREF(tgt);
  if (PyList_GET_SIZE(busy) != 1) {
    PyErr_SetString(PyExc_RuntimeError, "call_present_map: begin_single_range marked "
                    "no entry");
    goto out;
  }
  PyObject *kargs, *marked, *again;
  int got = mark_map(a, args, NULL, &kargs, &marked, &again, NULL);
  if (got == 2)
    Py_DECREF(again);
  if (got == 1)
    result = launched(a, call_with(args[6], kargs, want), kargs, marked);
  else if (got >= 0)
    result = Py_NewRef(Py_False);                  /* unmapped meanwhile: Python, afresh */
  PyObject *typ, *val, *tb;                        /* the call's exception, kept */
  PyErr_Fetch(&typ, &val, &tb);
  PyObject *end_args[6] = {p, n, t, Py_None, PyList_GET_ITEM(busy, 0),
                           result == Py_True ? Py_True : Py_False};
  PyObject *ended = Accel_end(a, end_args, 6, NULL);
  if (ended && typ) {
    Py_DECREF(ended);
    PyErr_Restore(typ, val, tb);
  } else if (!ended) {                             /* the unmap's own failure wins */
    Py_XDECREF(typ); Py_XDECREF(val); Py_XDECREF(tb);
    Py_CLEAR(result);
  } else {
    Py_DECREF(ended);
  }
out:
  Py_DECREF(absent);
  Py_XDECREF(busy); Py_XDECREF(p); Py_XDECREF(n); Py_XDECREF(t);
  return result;
}
