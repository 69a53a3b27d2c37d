/* Part of the compiled mapping core (accel.c includes it, after entry.c): the one owner of a
 * table's state, TableCore. Its pure-Python twin is offload/mapping/core.py; both have the
 * same methods. The C paths of the core read these structs directly: no attribute by name. */

/* ---- TableCore ---------------------------------------------------------------------- */

/* Sorted, non-overlapping entries of one table, with their host ranges kept beside them
 * as numbers (hst_begin, hst_end and hst_base never change once an entry is in a table),
 * the table's lock, the condition busy marks wait on, how many threads wait on it, and
 * whether anyone observes the table (INFO bits or a listener). */
typedef struct {
  PyObject_HEAD
  Lock *lock;
  PyObject *idle;
  Py_ssize_t waiting;
  char observed;
  Py_ssize_t count, cap;
  uintptr_t *starts, *ends, *bases;
  PyObject **entries;
} TableCore;

static PyTypeObject TableCoreType;

/* An int (an exact one with `exact`) as an address: 1, else 0 (error cleared). */
static int int_addr(PyObject *o, uintptr_t *out, int exact) {
  if (o == NULL || !(exact ? PyLong_CheckExact(o) : PyLong_Check(o)))
    return 0;
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  *out = (uintptr_t)v;
  return 1;
}
#define addr_of(o, out) int_addr(o, out, 0)     /* any int: the core's own methods */
#define as_addr(o, out) int_addr(o, out, 1)     /* an exact int: the fewer-steps paths */

static uintptr_t end_of(uintptr_t p, uintptr_t n) {       /* p + n, saturated */
  return p + n < p ? UINTPTR_MAX : p + n;
}

/* Index of the first start > p (bisect_right). */
static Py_ssize_t core_after(TableCore *c, uintptr_t p) {
  Py_ssize_t lo = 0, hi = c->count;
  while (lo < hi) {
    Py_ssize_t mid = (lo + hi) / 2;
    if (p < c->starts[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* The entry starting at p (borrowed), or NULL; *at its index. */
static PyObject *core_get(TableCore *c, uintptr_t p, Py_ssize_t *at) {
  Py_ssize_t i = core_after(c, p) - 1;
  if (at)
    *at = i;
  return i >= 0 && c->starts[i] == p ? c->entries[i] : NULL;
}

/* The entry overlapping [p, p+n) or containing p (borrowed), or NULL; *inside: whether it
 * holds the range. A zero-length range is also held by the entry before it whose base lies
 * past it, or by the next entry whose base it reaches (LLVM's lookupMapping). */
static PyObject *core_find(TableCore *c, uintptr_t p, uintptr_t n, int *inside) {
  Py_ssize_t i = core_after(c, p) - 1;
  uintptr_t end = end_of(p, n);
  *inside = 0;
  if (i >= 0 && c->starts[i] == p) {
    *inside = end <= c->ends[i];
    return c->entries[i];
  }
  if (n == 0) {
    if (i >= 0 && (p < c->ends[i] || p < c->bases[i])) {
      *inside = 1;
      return c->entries[i];
    }
    if (i + 1 < c->count && p >= c->bases[i + 1]) {
      *inside = 1;
      return c->entries[i + 1];
    }
    return NULL;
  }
  if (i >= 0 && p < c->ends[i]) {
    *inside = end <= c->ends[i];
    return c->entries[i];
  }
  if (i + 1 < c->count && c->starts[i + 1] < end)
    return c->entries[i + 1];
  return NULL;
}

/* Entry e (its ranges read now) put in at its place: 0, or -1 with an exception. */
static int core_insert(TableCore *c, PyObject *e) {
  uintptr_t p, end, base;
  if (!IS_ENTRY(e) || !addr_of(F(e, HST_BEGIN), &p) || !addr_of(F(e, HST_END), &end) ||
      !addr_of(F(e, HST_BASE), &base)) {
    PyErr_Format(PyExc_TypeError, "TableCore.insert: %R is not an entry of this core with "
                 "integer host addresses", e);
    return -1;
  }
  Py_ssize_t i = core_after(c, p);
  if (i > 0 && c->starts[i - 1] == p) {
    PyErr_Format(PyExc_ValueError, "TableCore.insert: an entry already starts at %p",
                 (void *)p);
    return -1;
  }
  if (c->count == c->cap) {
    Py_ssize_t cap = c->cap ? 2 * c->cap : 16;
    uintptr_t *s = PyMem_Realloc(c->starts, cap * sizeof *s);
    if (s) c->starts = s;
    uintptr_t *en = s ? PyMem_Realloc(c->ends, cap * sizeof *en) : NULL;
    if (en) c->ends = en;
    uintptr_t *b = en ? PyMem_Realloc(c->bases, cap * sizeof *b) : NULL;
    if (b) c->bases = b;
    PyObject **o = b ? PyMem_Realloc(c->entries, cap * sizeof *o) : NULL;
    if (!o) {
      PyErr_NoMemory();
      return -1;
    }
    c->entries = o;
    c->cap = cap;
  }
  Py_ssize_t move = c->count - i;
  memmove(c->starts + i + 1, c->starts + i, move * sizeof *c->starts);
  memmove(c->ends + i + 1, c->ends + i, move * sizeof *c->ends);
  memmove(c->bases + i + 1, c->bases + i, move * sizeof *c->bases);
  memmove(c->entries + i + 1, c->entries + i, move * sizeof *c->entries);
  c->starts[i] = p;
  c->ends[i] = end;
  c->bases[i] = base;
  c->entries[i] = Py_NewRef(e);
  c->count++;
  return 0;
}

/* The entry at index i taken out; its reference goes to the caller. */
static PyObject *core_take(TableCore *c, Py_ssize_t i) {
  PyObject *e = c->entries[i];
  Py_ssize_t move = c->count - i - 1;
  memmove(c->starts + i, c->starts + i + 1, move * sizeof *c->starts);
  memmove(c->ends + i, c->ends + i + 1, move * sizeof *c->ends);
  memmove(c->bases + i, c->bases + i + 1, move * sizeof *c->bases);
  memmove(c->entries + i, c->entries + i + 1, move * sizeof *c->entries);
  c->count--;
  return e;
}

/* Entry e taken out when it is in the table (its reference dropped). */
static void core_remove(TableCore *c, PyObject *e) {
  uintptr_t p;
  Py_ssize_t i;
  if (IS_ENTRY(e) && addr_of(F(e, HST_BEGIN), &p) && core_get(c, p, &i) == e)
    Py_DECREF(core_take(c, i));
}

static PyObject *TableCore_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *names[] = {"lock", "idle", NULL};
  PyObject *lock, *idle;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O:TableCore", names, &LockType, &lock, &idle))
    return NULL;
  TableCore *c = (TableCore *)type->tp_alloc(type, 0);
  if (!c)
    return NULL;
  c->lock = (Lock *)Py_NewRef(lock);
  c->idle = Py_NewRef(idle);
  return (PyObject *)c;
}

static void core_drop_all(TableCore *c) {
  Py_ssize_t n = c->count;
  PyObject **old = c->entries;
  c->count = 0;
  for (Py_ssize_t i = 0; i < n; i++)
    Py_DECREF(old[i]);
}

static int TableCore_traverse(TableCore *c, visitproc visit, void *arg) {
  Py_VISIT(c->lock);
  Py_VISIT(c->idle);
  for (Py_ssize_t i = 0; i < c->count; i++)
    Py_VISIT(c->entries[i]);
  return 0;
}

static int TableCore_clear_refs(TableCore *c) {
  core_drop_all(c);
  Py_CLEAR(c->idle);
  Py_CLEAR(c->lock);
  return 0;
}

static void TableCore_dealloc(TableCore *c) {
  PyObject_GC_UnTrack(c);
  TableCore_clear_refs(c);
  PyMem_Free(c->starts);
  PyMem_Free(c->ends);
  PyMem_Free(c->bases);
  PyMem_Free(c->entries);
  Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *TableCore_get(TableCore *c, PyObject *po) {
  uintptr_t p;
  PyObject *e = addr_of(po, &p) ? core_get(c, p, NULL) : NULL;
  return Py_NewRef(e ? e : Py_None);
}

static PyObject *TableCore_find(TableCore *c, PyObject *const *args, Py_ssize_t nargs) {
  uintptr_t p, n;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "find(p, n)");
    return NULL;
  }
  if (!addr_of(args[0], &p) || !addr_of(args[1], &n)) {
    PyErr_Format(PyExc_ValueError, "find(p, n): %R and %R are not an address and a size",
                 args[0], args[1]);
    return NULL;
  }
  int inside;
  PyObject *e = core_find(c, p, n, &inside);
  return Py_BuildValue("(OO)", e ? e : Py_None, inside ? Py_True : Py_False);
}

static PyObject *TableCore_insert(TableCore *c, PyObject *e) {
  if (core_insert(c, e) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *TableCore_remove(TableCore *c, PyObject *e) {
  core_remove(c, e);
  Py_RETURN_NONE;
}

static PyObject *TableCore_entries(TableCore *c, PyObject *unused) {
  (void)unused;
  PyObject *out = PyList_New(c->count);
  for (Py_ssize_t i = 0; out && i < c->count; i++)
    PyList_SET_ITEM(out, i, Py_NewRef(c->entries[i]));
  return out;
}

static PyObject *TableCore_clear(TableCore *c, PyObject *unused) {
  (void)unused;
  core_drop_all(c);
  Py_RETURN_NONE;
}

/* Wake the threads waiting on the idle condition, if any (the table lock held): 0, or -1. */
static int core_wake(TableCore *c) {
  if (!c->waiting)
    return 0;
  PyObject *w = PyObject_CallMethodNoArgs(c->idle, s_notify_all);
  if (!w)
    return -1;
  Py_DECREF(w);
  return 0;
}

/* The flags after the entry: positional, or by the keyword names given. */
static int flag_args(const char *call, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int nflags, int *out) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs < 1 || nargs > 1 + nflags) {
    PyErr_Format(PyExc_TypeError, "TableCore.%s takes an entry and at most %d flags", call,
                 nflags);
    return 0;
  }
  for (int k = 0; k < nflags; k++)
    out[k] = 0;
  for (Py_ssize_t i = 1; i < nargs + nkw; i++) {
    int k = (int)i - 1;
    if (i >= nargs) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i - nargs);
      for (k = 0; k < nflags && PyUnicode_CompareWithASCIIString(key, names[k]) != 0; k++)
        ;
      if (k == nflags) {
        PyErr_Format(PyExc_TypeError, "TableCore.%s: no flag %R", call, key);
        return 0;
      }
    }
    int v = PyObject_IsTrue(args[i]);
    if (v < 0)
      return 0;
    out[k] = v;
  }
  return 1;
}

static PyObject *TableCore_reference(TableCore *c, PyObject *const *args, Py_ssize_t nargsf,
                                     PyObject *kwnames) {
  static const char *const names[] = {"hold"};
  int hold;
  (void)c;
  if (!flag_args("reference", args, nargsf, kwnames, names, 1, &hold) ||
      !entry_check(args[0], "reference") || entry_reference(args[0], hold) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *TableCore_unreference(TableCore *c, PyObject *const *args, Py_ssize_t nargsf,
                                       PyObject *kwnames) {
  static const char *const names[] = {"hold", "delete"};
  int f[2], last;
  (void)c;
  if (!flag_args("unreference", args, nargsf, kwnames, names, 2, f) ||
      !entry_check(args[0], "unreference") || entry_unreference(args[0], f[0], f[1], &last) < 0)
    return NULL;
  return PyBool_FromLong(last);
}

static PyObject *TableCore_reference_forever(TableCore *c, PyObject *e) {
  (void)c;
  if (!entry_check(e, "reference_forever") || entry_reference_forever(e) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *TableCore_mark(TableCore *c, PyObject *e) {
  (void)c;
  if (!entry_check(e, "mark") || entry_mark(e) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *TableCore_unmark(TableCore *c, PyObject *entries) {
  PyObject *seq = PySequence_Fast(entries, "TableCore.unmark: expected a sequence of entries");
  if (!seq)
    return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int bad = 0;
  for (Py_ssize_t i = 0; i < n && !bad; i++) {
    PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
    bad = !entry_check(e, "unmark") || entry_unmark(e) < 0;
  }
  Py_DECREF(seq);
  if (core_wake(c) < 0 || bad)      /* the ones given back before a bad one stay given back */
    return NULL;
  Py_RETURN_NONE;
}

static Py_ssize_t TableCore_len(TableCore *c) { return c->count; }

static PyObject *TableCore_entry_type(TableCore *c, void *unused) {
  (void)c; (void)unused;
  return Py_NewRef((PyObject *)&EntryType);
}

static PyMethodDef TableCore_methods[] = {
    {"get", (PyCFunction)TableCore_get, METH_O, "get(p) -> the entry starting at p, or None"},
    {"find", (PyCFunction)(void (*)(void))TableCore_find, METH_FASTCALL,
     "find(p, n) -> (entry overlapping [p, p+n) or containing p, or None; whether it holds "
     "the range)"},
    {"insert", (PyCFunction)TableCore_insert, METH_O, "insert(entry): put in at its place"},
    {"remove", (PyCFunction)TableCore_remove, METH_O, "remove(entry): taken out, if in"},
    {"entries", (PyCFunction)TableCore_entries, METH_NOARGS, "entries() -> a list, sorted"},
    {"clear", (PyCFunction)TableCore_clear, METH_NOARGS, "clear(): every entry out"},
    {"reference", (PyCFunction)(void (*)(void))TableCore_reference,
     METH_FASTCALL | METH_KEYWORDS, "reference(entry, hold=False): one more reference"},
    {"unreference", (PyCFunction)(void (*)(void))TableCore_unreference,
     METH_FASTCALL | METH_KEYWORDS,
     "unreference(entry, hold=False, delete=False) -> whether no reference is left"},
    {"reference_forever", (PyCFunction)TableCore_reference_forever, METH_O,
     "reference_forever(entry): an association's count (INF)"},
    {"mark", (PyCFunction)TableCore_mark, METH_O, "mark(entry): in use once more"},
    {"unmark", (PyCFunction)TableCore_unmark, METH_O,
     "unmark(entries): each in use once less; waiters on idle woken"},
    {NULL, NULL, 0, NULL}};

static PyMemberDef TableCore_members[] = {
    {"lock", T_OBJECT_EX, offsetof(TableCore, lock), READONLY, "the table's lock"},
    {"idle", T_OBJECT_EX, offsetof(TableCore, idle), READONLY,
     "the condition (over lock) an entry's busy count falling to 0 is told on"},
    {"waiting", T_PYSSIZET, offsetof(TableCore, waiting), 0, "threads waiting on idle"},
    {"observed", T_BOOL, offsetof(TableCore, observed), 0,
     "INFO bits or a listener: the fewer-steps paths stand aside"},
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef TableCore_getset[] = {
    {"entry_type", (getter)TableCore_entry_type, NULL, "the type of this core's entries", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods TableCore_seq = {.sq_length = (lenfunc)TableCore_len};

static PyTypeObject TableCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "offload._accel_c.TableCore",
    .tp_basicsize = sizeof(TableCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = TableCore_new,
    .tp_dealloc = (destructor)TableCore_dealloc,
    .tp_traverse = (traverseproc)TableCore_traverse,
    .tp_clear = (inquiry)TableCore_clear_refs,
    .tp_as_sequence = &TableCore_seq,
    .tp_methods = TableCore_methods,
    .tp_members = TableCore_members,
    .tp_getset = TableCore_getset,
    .tp_doc = "TableCore(lock, idle): one table's entries, lock and waiters (the compiled twin "
              "of offload.mapping.core.TableCore).",
};
