/* Part of the compiled mapping core (accel.c includes it, before table.c): the entries,
 * HostDataToTarget, and the one place their reference and busy counts change. The
 * pure-Python twin is offload/entries.py with the counts in offload/mapping/core.py;
 * _accel.table_core refuses this core when the entry fields differ from the twin's. */

/* The fields of HostDataToTarget, in the twin's __slots__ order. */
enum { HST_BEGIN, HST_END, HST_BASE, TGT_BEGIN, DYN, HOLD, OWNER, NAME, PINNED, OWNED, READY,
       FAILED, WHERE_, BUSY, VIEWS, SHADOWS, NSLOTS };
static const char *slot_names[NSLOTS] = {
    "hst_begin", "hst_end", "hst_base", "tgt_begin", "dyn", "hold", "owner", "name", "pinned",
    "owned", "ready", "failed", "where", "busy", "views", "shadows"};

typedef struct {
  PyObject_HEAD
  PyObject *f[NSLOTS];
} Entry;

#define F(e, i) (((Entry *)(e))->f[i])
static PyTypeObject EntryType;
#define IS_ENTRY(o) Py_IS_TYPE(o, &EntryType)

/* Store v (a new reference, stolen) in field i of o; the old value goes to *old, else is
 * dropped. */
static void put(PyObject *o, int i, PyObject *v, PyObject **old) {
  PyObject *was = F(o, i);
  F(o, i) = v;
  if (old)
    *old = was;
  else
    Py_XDECREF(was);
}

/* Fresh entry e filled as HostDataToTarget(hst, end - hst, tgt, name, owner, owned) is:
 * no reference, not in use, no copy in flight (every reference is borrowed). */
static void entry_fill(PyObject *e, PyObject *hst, PyObject *end, PyObject *tgt, PyObject *name,
                       PyObject *owner, PyObject *owned) {
  PyObject *zero = PyLong_FromLong(0);              /* (a small int: never NULL) */
  PyObject *v[NSLOTS] = {hst, end, hst, tgt, zero, zero, owner, name, Py_False, owned, Py_None,
                         Py_False, s_unknown_where, zero, Py_None, Py_None};
  for (int i = 0; i < NSLOTS; i++)
    put(e, i, Py_NewRef(v[i]), NULL);
  Py_DECREF(zero);
}

/* HostDataToTarget(hst, size, tgt, name, owner, owned=True), as the twin's __init__. */
static int Entry_init(Entry *e, PyObject *args, PyObject *kw) {
  static char *names[] = {"hst", "size", "tgt", "name", "owner", "owned", NULL};
  PyObject *hst, *size, *tgt, *name, *owner, *owned = Py_True;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|O:HostDataToTarget", names, &hst, &size,
                                   &tgt, &name, &owner, &owned))
    return -1;
  PyObject *end = PyNumber_Add(hst, size);
  if (!end)
    return -1;
  entry_fill((PyObject *)e, hst, end, tgt, name, owner, owned);
  Py_DECREF(end);
  return 0;
}

static int Entry_traverse(Entry *e, visitproc visit, void *arg) {
  for (int i = 0; i < NSLOTS; i++)
    Py_VISIT(e->f[i]);
  return 0;
}

static int Entry_clear(Entry *e) {
  for (int i = 0; i < NSLOTS; i++)
    Py_CLEAR(e->f[i]);
  return 0;
}

static void Entry_dealloc(Entry *e) {
  PyObject_GC_UnTrack(e);
  Entry_clear(e);
  Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *Entry_size(Entry *e, void *unused) {
  (void)unused;
  if (!e->f[HST_END] || !e->f[HST_BEGIN]) {
    PyErr_SetString(PyExc_AttributeError, "size: the entry is not initialised");
    return NULL;
  }
  return PyNumber_Subtract(e->f[HST_END], e->f[HST_BEGIN]);
}

static PyObject *Entry_total(Entry *e, PyObject *unused) {
  (void)unused;
  if (!e->f[DYN] || !e->f[HOLD]) {
    PyErr_SetString(PyExc_AttributeError, "total: the entry is not initialised");
    return NULL;
  }
  return PyNumber_Add(e->f[DYN], e->f[HOLD]);
}

static PyObject *Entry_repr(Entry *e) {
  PyObject *size = Entry_size(e, NULL);
  PyObject *begin = size ? PyNumber_ToBase(e->f[HST_BEGIN], 16) : NULL;
  PyObject *tgt = begin && e->f[TGT_BEGIN] ? PyNumber_ToBase(e->f[TGT_BEGIN], 16) : NULL;
  PyObject *r = tgt && e->f[DYN] && e->f[HOLD]
      ? PyUnicode_FromFormat("HostDataToTarget(%U+%S -> %U, dyn=%S, hold=%S)", begin, size, tgt,
                             e->f[DYN], e->f[HOLD])
      : NULL;
  Py_XDECREF(size);
  Py_XDECREF(begin);
  Py_XDECREF(tgt);
  return r;
}

static PyMemberDef Entry_members[NSLOTS + 1];      /* filled from slot_names at start */

static PyGetSetDef Entry_getset[] = {
    {"size", (getter)Entry_size, NULL, "hst_end - hst_begin", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef Entry_methods[] = {
    {"total", (PyCFunction)Entry_total, METH_NOARGS, "dyn + hold"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "offload._accel_c.HostDataToTarget",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Entry_init,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
    .tp_repr = (reprfunc)Entry_repr,
    .tp_members = Entry_members,
    .tp_getset = Entry_getset,
    .tp_methods = Entry_methods,
    .tp_doc = "One mapping: host range -> device range, with dynamic and hold counts "
              "(the compiled twin of offload.entries.HostDataToTarget).",
};

/* The entry type's fields as members, in slot order; the tuple of their names. */
static PyObject *entry_fields(void) {
  PyObject *names = PyTuple_New(NSLOTS);
  if (!names)
    return NULL;
  for (int i = 0; i < NSLOTS; i++) {
    Entry_members[i] = (PyMemberDef){(char *)slot_names[i], T_OBJECT_EX,
                                     offsetof(Entry, f) + i * sizeof(PyObject *), 0, NULL};
    PyObject *s = PyUnicode_FromString(slot_names[i]);
    if (!s) {
      Py_DECREF(names);
      return NULL;
    }
    PyTuple_SET_ITEM(names, i, s);
  }
  Entry_members[NSLOTS] = (PyMemberDef){NULL, 0, 0, 0, NULL};
  return names;
}


/* ---- the counts: the one place an entry's reference and busy counts change (the caller
 * holds the table lock; TableCore's reference/unreference/mark/unmark and the fewer-steps
 * paths all come here) ------------------------------------------------------------------ */

/* Count field i of e (DYN, HOLD or BUSY): 1 with *v, or with *inf for an association's
 * INF (where inf is given: reference counts); else 0 with a TypeError naming the value. */
static int count_of(PyObject *e, int i, long long *v, int *inf) {
  PyObject *o = F(e, i);
  if (inf)
    *inf = 0;
  if (o && PyLong_CheckExact(o)) {                 /* the common case first: a flag test */
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow && *v >= 0)
      return 1;
    PyErr_Clear();
  } else if (inf && o && PyFloat_Check(o) && isinf(PyFloat_AS_DOUBLE(o)) &&
             PyFloat_AS_DOUBLE(o) > 0) {
    *inf = 1;
    return 1;
  } else if (o && PyLong_Check(o)) {
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow && !(*v == -1 && PyErr_Occurred()) && *v >= 0)
      return 1;
    PyErr_Clear();
  }
  PyErr_Format(PyExc_TypeError, "%s of an entry is %R: expected a count (an int >= 0%s)",
               slot_names[i], o ? o : Py_None, inf ? ", or INF for an association" : "");
  return 0;
}

static int count_set(PyObject *e, int i, long long v) {
  PyObject *o = PyLong_FromLongLong(v);
  if (!o)
    return -1;
  put(e, i, o, NULL);
  return 0;
}

static int entry_check(PyObject *e, const char *what) {
  if (IS_ENTRY(e))
    return 1;
  PyErr_Format(PyExc_TypeError, "TableCore.%s: %R is not an entry of this core", what, e);
  return 0;
}

/* One more reference on e, hold or dynamic (an association's INF stays INF): 0, or -1
 * with an exception and nothing changed. */
static int entry_reference(PyObject *e, int hold) {
  long long v;
  int inf, i = hold ? HOLD : DYN;
  if (!count_of(e, i, &v, &inf))
    return -1;
  return inf ? 0 : count_set(e, i, v + 1);
}

/* An association's count on e (INF: the mapping rules never unmap it): 0, or -1. */
static int entry_reference_forever(PyObject *e) {
  PyObject *inf = PyFloat_FromDouble(INFINITY);
  if (!inf)
    return -1;
  put(e, DYN, inf, NULL);
  return 0;
}

/* One reference fewer on e: a hold one, a dynamic one, or (del) every dynamic one; never
 * below 0, INF stays. *last: e holds no reference now. 0, or -1 with an exception and
 * nothing changed. */
static int entry_unreference(PyObject *e, int hold, int del, int *last) {
  long long v, other = 0;
  int inf, oinf, i = hold && !del ? HOLD : DYN;
  if (!count_of(e, i, &v, &inf) || !count_of(e, i == DYN ? HOLD : DYN, &other, &oinf))
    return -1;
  if (!inf) {
    v = del || v == 0 ? 0 : v - 1;
    if (count_set(e, i, v) < 0)
      return -1;
  }
  *last = !inf && !oinf && v + other == 0;
  return 0;
}

/* e marked in use once more (its device memory stays until unmarked): 0, or -1. */
static int entry_mark(PyObject *e) {
  long long v;
  if (!count_of(e, BUSY, &v, NULL))
    return -1;
  return count_set(e, BUSY, v + 1);
}

/* One mark of e taken off: 0, or -1 with an exception (a RuntimeError when e is not
 * marked: a mark given back twice) and nothing changed. */
static int entry_unmark(PyObject *e) {
  long long v;
  if (!count_of(e, BUSY, &v, NULL))
    return -1;
  if (v == 0) {
    PyErr_Format(PyExc_RuntimeError, "TableCore.unmark: %R is not marked in use (a mark "
                 "given back twice)", e);
    return -1;
  }
  return count_set(e, BUSY, v - 1);
}
