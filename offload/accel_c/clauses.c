/* Part of the accelerator (offload/accel_c/accel.c includes it): MapClause.single_range through the
 * buffer protocol. */

/* single_range(clause): MapClause.single_range in one call (the buffer protocol gives the address, size,
 * C-contiguity and writability at once). Set up by single_range_setup(ndarray, not_single_range). */
static PyObject *single_range_py;
static long not_single_range = -1;

static PyObject *single_range_setup(PyObject *mod, PyObject *args) {
  PyObject *type, *py;
  long mask;
  (void)mod;
  if (!PyArg_ParseTuple(args, "O!lO", &PyType_Type, &type, &mask, &py))
    return NULL;
  Py_INCREF(type);
  Py_XSETREF(ndarray_type, type);
  Py_INCREF(py);
  Py_XSETREF(single_range_py, py);
  not_single_range = mask;
  Py_RETURN_NONE;
}

/* -1: no buffer (ask Python); 0: not a whole array; 1: a whole array, *p, *n, *ro set. */
static int whole_array_buffer(PyObject *arr, long t, uintptr_t *pp, Py_ssize_t *np_, int *rop) {
  Py_buffer v;
  if (PyObject_GetBuffer(arr, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
    PyErr_Clear();                 /* not C-contiguous, or a dtype buffers do not carry */
    return -1;
  }
  int objects = v.format && strchr(v.format, 'O') != NULL;   /* (or a field name with O) */
  *np_ = v.len;
  *rop = v.readonly;
  *pp = (uintptr_t)v.buf;
  PyBuffer_Release(&v);
  return !(objects || *np_ <= 0 || (*rop && (t & 2)));
}

static PyObject *single_range(PyObject *mod, PyObject *clause) {
  (void)mod;
  if (!ndarray_type) {
    PyErr_SetString(PyExc_RuntimeError, "offload accelerator: single_range_setup not called");
    return NULL;
  }
  PyObject *arr = PyObject_GetAttr(clause, s_array);
  if (!arr)
    return NULL;
  PyObject *result = Py_None, *to = NULL;
  if (Py_TYPE(arr) != (PyTypeObject *)ndarray_type || !(to = PyObject_GetAttr(clause, s_type)))
    goto out;
  long t = PyLong_AsLong(to);
  if (t == -1 && PyErr_Occurred())
    goto out;
  if (t & not_single_range)
    goto out;
  uintptr_t p;
  Py_ssize_t n;
  int ro, got = whole_array_buffer(arr, t, &p, &n, &ro);
  if (got < 0) {
    Py_DECREF(arr);
    Py_DECREF(to);
    return PyObject_CallOneArg(single_range_py, clause);
  }
  if (!got)
    goto out;
  result = Py_BuildValue("(KnlOO)", (unsigned long long)p, n, t, arr, ro ? Py_True : Py_False);
  Py_DECREF(arr);
  Py_DECREF(to);
  return result;
out:
  PyErr_Clear();
  Py_DECREF(arr);
  Py_XDECREF(to);
  Py_RETURN_NONE;
}
