/* Part of the accelerator (offload/accel_c/accel.c includes it): a lock the C paths take
 * directly. */

/* Lock: threading.Lock's interface (acquire(blocking=True, timeout=-1), release, locked,
 * the context manager) over a PyThread lock that the accelerator's C paths take and
 * release directly. Tables and devices use it when the accelerator loads. A blocked
 * acquire waits with the GIL released (not interrupted by signals: tables hold it for
 * microseconds). */
typedef struct {
  PyObject_HEAD
  PyThread_type_lock lock;
  char held;
} Lock;

/* offload.locks' rule, kept here for this type: each thread counts the steps it holds
 * (taken here, with the GIL held, so no Python code of the thread runs between the count
 * and the lock), and a thread leaving its outermost step through the Python methods runs
 * the finalizer work deferred meanwhile (steps_setup(pending, drain)). */
static _Thread_local long step_depth;
static PyObject *steps_pending, *steps_drain;

static int steps_run_deferred(void) {      /* -1: what it raised (a Ctrl-C) is set */
  if (step_depth || !steps_pending || !PyList_GET_SIZE(steps_pending))
    return 0;
  PyObject *r = PyObject_CallNoArgs(steps_drain);
  if (!r)
    return -1;
  Py_DECREF(r);
  return 0;
}

static PyObject *steps_setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *pending, *drain;
  if (!PyArg_ParseTuple(args, "O!O:steps_setup", &PyList_Type, &pending, &drain))
    return NULL;
  Py_XSETREF(steps_pending, Py_NewRef(pending));
  Py_XSETREF(steps_drain, Py_NewRef(drain));
  Py_RETURN_NONE;
}

static PyObject *steps_depth(PyObject *self, PyObject *unused) {
  (void)self; (void)unused;
  return PyLong_FromLong(step_depth);
}

static int lock_take(Lock *l) {                 /* without blocking: 1 taken, 0 held */
  if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK))
    return 0;
  l->held = 1;
  step_depth++;
  return 1;
}

static void lock_give(Lock *l) {
  l->held = 0;
  step_depth--;
  PyThread_release_lock(l->lock);
}

static int lock_wait(Lock *l, PY_TIMEOUT_T microseconds) {   /* 1 taken, 0 timed out */
  if (lock_take(l))
    return 1;
  if (microseconds == 0)
    return 0;
  PyLockStatus r;
  Py_BEGIN_ALLOW_THREADS
  r = PyThread_acquire_lock_timed(l->lock, microseconds, 0);
  Py_END_ALLOW_THREADS
  if (r != PY_LOCK_ACQUIRED)
    return 0;
  l->held = 1;
  step_depth++;
  return 1;
}

static PyObject *Lock_acquire(Lock *l, PyObject *args, PyObject *kw) {
  static char *names[] = {"blocking", "timeout", NULL};
  int blocking = 1;
  double timeout = -1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|pd:acquire", names, &blocking, &timeout))
    return NULL;
  if (!blocking && timeout != -1) {
    PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
    return NULL;
  }
  if (timeout < 0 && timeout != -1) {
    PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
    return NULL;
  }
  PY_TIMEOUT_T us = !blocking ? 0 : timeout < 0 ? -1 : (PY_TIMEOUT_T)(timeout * 1e6);
  if (steps_run_deferred() < 0)          /* before the outermost step, not inside it */
    return NULL;
  return PyBool_FromLong(lock_wait(l, us));
}

static PyObject *Lock_enter(Lock *l, PyObject *unused) {
  (void)unused;
  if (steps_run_deferred() < 0)
    return NULL;
  lock_wait(l, -1);
  Py_RETURN_TRUE;
}

static PyObject *Lock_release(Lock *l, PyObject *unused) {
  (void)unused;
  if (!l->held) {
    PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
    return NULL;
  }
  lock_give(l);
  if (steps_run_deferred() < 0)          /* after the outermost step: a Ctrl-C raised */
    return NULL;                         /* there propagates from the lock's release */
  Py_RETURN_NONE;
}

static PyObject *Lock_exit(Lock *l, PyObject *args) {
  (void)args;
  return Lock_release(l, NULL);
}

static PyObject *Lock_locked(Lock *l, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(l->held);
}

static PyObject *Lock_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
    PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
    return NULL;
  }
  Lock *l = (Lock *)type->tp_alloc(type, 0);
  if (!l)
    return NULL;
  if (!(l->lock = PyThread_allocate_lock())) {
    Py_DECREF(l);
    PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
    return NULL;
  }
  return (PyObject *)l;
}

static void Lock_dealloc(Lock *l) {
  if (l->lock) {
    if (l->held)
      PyThread_release_lock(l->lock);
    PyThread_free_lock(l->lock);
  }
  Py_TYPE(l)->tp_free((PyObject *)l);
}

static PyObject *Lock_repr(Lock *l) {
  return PyUnicode_FromFormat("<offload lock %s>", l->held ? "locked" : "unlocked");
}

static PyMethodDef Lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool"},
    {"release", (PyCFunction)Lock_release, METH_NOARGS, "release()"},
    {"locked", (PyCFunction)Lock_locked, METH_NOARGS, "locked() -> bool"},
    {"__enter__", (PyCFunction)Lock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Lock_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "offload._accel_c.Lock",
    .tp_basicsize = sizeof(Lock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Lock_new,
    .tp_dealloc = (destructor)Lock_dealloc,
    .tp_repr = (reprfunc)Lock_repr,
    .tp_methods = Lock_methods,
    .tp_doc = "A lock with threading.Lock's interface that offload's C paths take directly.",
};
