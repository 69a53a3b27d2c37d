/* Part of the accelerator (offload/accel_c/accel.c includes it): runtime.operation's wrapper. */

/* Operation(fn, tls, process, current, unavailable, sigint, deliver): runtime.operation's
 * wrapper in C. Counts a public call as an operation in flight (the runtime's _inflight
 * list), refuses new ones while the runtime shuts down, delivers a Ctrl-C that arrived
 * meanwhile after the call; nested calls run straight. current() gives the runtime when
 * none is live, or None (release_operation): then a plain call. A method when set on a
 * class. No Python runs between its start and the mark of the thread as inside an
 * operation, so a Ctrl-C never finds a counted operation unmarked. */
typedef struct {
  PyObject_HEAD
  PyObject *fn, *tls, *process, *current, *unavailable, *sigint, *deliver, *dict;
  vectorcallfunc vectorcall;
} Operation;


static PyObject *Operation_call(Operation *o, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames) {
  PyObject *inner = PyObject_GetAttr(o->tls, s_rt);
  if (!inner)
    PyErr_Clear();                              /* (never set in this thread) */
  else if (inner != Py_None) {
    Py_DECREF(inner);
    return PyObject_Vectorcall(o->fn, args, nargsf, kwnames);    /* nested */
  }
  Py_XDECREF(inner);
  PyObject *rt = PyObject_GetAttr(o->process, s_live);
  if (!rt)
    return NULL;
  int closing = 1;
  if (rt != Py_None) {
    PyObject *c = PyObject_GetAttr(rt, s_closing);
    closing = c ? PyObject_IsTrue(c) : 1;
    Py_XDECREF(c);
  }
  if (closing) {
    PyErr_Clear();
    Py_DECREF(rt);
    if (!(rt = PyObject_CallNoArgs(o->current)))
      return NULL;
    if (rt == Py_None) {                      /* a release with none live: plain call */
      Py_DECREF(rt);
      return PyObject_Vectorcall(o->fn, args, nargsf, kwnames);
    }
  }
  PyObject *inflight = PyObject_GetAttr(rt, s_inflight);       /* a deque */
  PyObject *added = inflight ? PyObject_CallMethodOneArg(inflight, s_append, Py_True) : NULL;
  if (!added) {
    Py_XDECREF(inflight);
    Py_DECREF(rt);
    return NULL;
  }
  Py_DECREF(added);
  PyObject *cl = PyObject_GetAttr(rt, s_closing);
  int now_closing = cl ? PyObject_IsTrue(cl) : -1;
  Py_XDECREF(cl);
  if (now_closing) {                        /* shutdown began: undo, refuse */
    PyObject *gone = PyObject_CallMethodNoArgs(inflight, s_pop);
    Py_XDECREF(gone);
    Py_DECREF(inflight);
    Py_DECREF(rt);
    if (now_closing < 0)
      return NULL;
    PyObject *exc = PyObject_CallOneArg(o->unavailable, s_shutting);
    if (exc) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    }
    return NULL;
  }
  PyObject *result = NULL;
  if (PyObject_SetAttr(o->tls, s_rt, rt) == 0)
    result = PyObject_Vectorcall(o->fn, args, nargsf, kwnames);
  PyObject *typ = NULL, *val = NULL, *tb = NULL;
  PyErr_Fetch(&typ, &val, &tb);
  int bad = PyObject_SetAttr(o->tls, s_rt, Py_None) < 0;
  PyObject *gone = PyObject_CallMethodNoArgs(inflight, s_pop);
  bad |= gone == NULL;
  Py_XDECREF(gone);
  Py_DECREF(inflight);
  Py_DECREF(rt);
  PyObject *pending = bad ? NULL : PyObject_GetAttr(o->sigint, s_pending_attr);
  int deliver = pending ? PyObject_IsTrue(pending) : 0;
  Py_XDECREF(pending);
  if (!bad && deliver > 0) {                    /* Ctrl-C during the operation: now */
    PyObject *r = PyObject_CallNoArgs(o->deliver);
    if (!r) {
      bad = 1;
    } else {
      Py_DECREF(r);
    }
  }
  if (bad || PyErr_Occurred()) {                /* raised here: replaces the outcome */
    Py_XDECREF(result);
    Py_XDECREF(typ); Py_XDECREF(val); Py_XDECREF(tb);
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_RuntimeError, "offload operation bookkeeping failed");
    return NULL;
  }
  PyErr_Restore(typ, val, tb);
  return result;
}

static PyObject *Operation_get(PyObject *self, PyObject *obj, PyObject *type) {
  (void)type;
  if (obj == NULL || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

static int Operation_traverse(Operation *o, visitproc visit, void *arg) {
  Py_VISIT(o->fn); Py_VISIT(o->tls); Py_VISIT(o->process); Py_VISIT(o->current);
  Py_VISIT(o->unavailable); Py_VISIT(o->sigint); Py_VISIT(o->deliver); Py_VISIT(o->dict);
  return 0;
}

static int Operation_clear(Operation *o) {
  Py_CLEAR(o->fn); Py_CLEAR(o->tls); Py_CLEAR(o->process); Py_CLEAR(o->current);
  Py_CLEAR(o->unavailable); Py_CLEAR(o->sigint); Py_CLEAR(o->deliver); Py_CLEAR(o->dict);
  return 0;
}

static void Operation_dealloc(Operation *o) {
  PyObject_GC_UnTrack(o);
  Operation_clear(o);
  Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *Operation_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  Operation *o;
  if (kw && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "Operation takes positional arguments");
    return NULL;
  }
  if (!(o = (Operation *)type->tp_alloc(type, 0)))
    return NULL;
  if (!PyArg_UnpackTuple(args, "Operation", 7, 7, &o->fn, &o->tls, &o->process, &o->current,
                         &o->unavailable, &o->sigint, &o->deliver)) {
    o->fn = o->tls = o->process = o->current = o->unavailable = o->sigint = o->deliver = NULL;
    Py_DECREF(o);
    return NULL;
  }
  Py_INCREF(o->fn); Py_INCREF(o->tls); Py_INCREF(o->process); Py_INCREF(o->current);
  Py_INCREF(o->unavailable); Py_INCREF(o->sigint); Py_INCREF(o->deliver);
  o->vectorcall = (vectorcallfunc)Operation_call;
  return (PyObject *)o;
}

static PyObject *Operation_repr(Operation *o) {
  return PyUnicode_FromFormat("<offload operation %R>", o->fn);
}

static PyGetSetDef Operation_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject OperationType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "offload._accel_c.Operation",
    .tp_basicsize = sizeof(Operation),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Operation, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = Operation_get,
    .tp_dictoffset = offsetof(Operation, dict),
    .tp_getset = Operation_getset,
    .tp_new = Operation_new,
    .tp_repr = (reprfunc)Operation_repr,
    .tp_dealloc = (destructor)Operation_dealloc,
    .tp_traverse = (traverseproc)Operation_traverse,
    .tp_clear = (inquiry)Operation_clear,
    .tp_doc = "runtime.operation's wrapper, in C.",
};
