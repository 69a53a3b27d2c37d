/* Part of the accelerator (offload/accel_c/accel.c includes it): the shared state, the table's
 * and device's objects, and helpers. */

/* Objects the table and device keep for their lifetime (they change them in place). */
enum { TABLE, DEV, PLUGIN, KIND, NEW_LOCK, BEGIN_PY, END_PY, DEV_ACQUIRE, DEV_RELEASE, ALLOCS,
       POOL, POOL_FREE, STATS, RELEASE_PY, UPDATE_PY, POLL, CHECK, DRV, STREAMS, BOUNCE_PY,
       NREFS };

/* How update copies run in C: memcpy (host memory), or a CUDA copy of a pinned range
 * enqueued and spun on through the driver's entry points (the GIL released). */
enum { COPY_NONE, COPY_MEMCPY, COPY_CUDA };
#define MAX_STREAMS 8

typedef struct {
  int kind;
  uintptr_t set_ctx, ctx, h2d, d2h, query, launch, memset;
  double spin;                     /* seconds spun on the stream before Python polls */
  int nstreams;
  uintptr_t stream[MAX_STREAMS];
  char taken[MAX_STREAMS];
  long device;                     /* the plugin-local device id (PinnedEntry.dev key) */
  long long split;                 /* the plugin's pin_split grid (0: none) */
  uintptr_t bounce[MAX_STREAMS];   /* each stream's pinned bounce buffer (section.c) */
  Py_ssize_t bounce_bytes;         /* their size; 0: not asked for yet, -1: none */
} Copier;

typedef struct {
  PyObject_HEAD
  PyObject *ref[NREFS];
  TableCore *core;        /* the table's state: its entries, lock, waiters, `observed` */
  Py_ssize_t limit;       /* largest copy made under the table lock */
  Py_ssize_t stage[2];    /* unpinned copies from these sizes are staged (Transfers.
                             staging_from): [0] to the device, [1] from it; -1: none */
  Copier copier;
  Lock *dlock;            /* the device's lock, when of our type */
} Accel;

#define R(a, i) ((a)->ref[i])
static PyObject *ndarray_type;
static int whole_array_buffer(PyObject *arr, long t, uintptr_t *pp, Py_ssize_t *np_, int *rop);

static int try_lock(PyObject *acquire);
static void unlock(PyObject *release);

/* One of the two locks (`table`: the table's, else the device's) taken without blocking
 * (1, else 0) and given back; the two-lock forms below are what the steps call. */
static int lock_try(Accel *a, int table) {
  Lock *l = table ? a->core->lock : a->dlock;
  return l ? lock_take(l) : try_lock(R(a, DEV_ACQUIRE));
}

static void lock_back(Accel *a, int table) {
  Lock *l = table ? a->core->lock : a->dlock;
  if (l)
    lock_give(l);
  else
    unlock(R(a, DEV_RELEASE));
}

/* The table's lock taken without blocking: 1, else 0. */
static int try_table_lock(Accel *a) { return lock_try(a, 1); }
/* The device's lock taken without blocking: 1, else 0. */
static int try_device_lock(Accel *a) { return lock_try(a, 0); }
static void give_table_lock(Accel *a) { lock_back(a, 1); }
static void give_device_lock(Accel *a) { lock_back(a, 0); }

/* The table's lock taken waiting: 1, else -1 with an exception. */
static int wait_table_lock(Accel *a) { return lock_wait(a->core->lock, -1); }

/* Give back the device's lock (when `dev_locked`), then the table's. */
static void give_locks(Accel *a, int dev_locked) {
  if (dev_locked)
    give_device_lock(a);
  give_table_lock(a);
}

/* A lock taken without blocking, through its bound acquire: 1 taken, 0 held elsewhere
 * (or an error, cleared: the caller takes the Python path). */
static int try_lock(PyObject *acquire) {
  PyObject *r = PyObject_CallOneArg(acquire, Py_False);
  if (!r) {
    PyErr_Clear();
    return 0;
  }
  int got = r == Py_True;
  Py_DECREF(r);
  return got;
}

static void unlock_lock(PyObject *lock) {
  PyObject *r = PyObject_CallMethodNoArgs(lock, s_release);
  if (r)
    Py_DECREF(r);
  else
    PyErr_WriteUnraisable(lock);
}

static void unlock(PyObject *release) {
  PyObject *r = PyObject_CallNoArgs(release);
  if (r)
    Py_DECREF(r);
  else
    PyErr_WriteUnraisable(release);
}

/* 1 when `ready` (an entry's lock, or None) says the entry is made; else 0. */
static int made(PyObject *ready) {
  if (ready == Py_None)
    return 1;
  if (ready == NULL)
    return 0;
  PyObject *r = PyObject_CallMethodNoArgs(ready, s_locked);
  if (!r) {
    PyErr_Clear();
    return 0;
  }
  int held = r == Py_True;
  Py_DECREF(r);
  return !held;
}

/* An exact int as a signed size; 0 (error cleared) for anything else. */
static int as_size(PyObject *o, long long *out) {
  if (o == NULL || !PyLong_CheckExact(o))
    return 0;
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  *out = v;
  return 1;
}

/* The attribute as an exact int (0: missing or not one, error cleared). */
static int attr_size(PyObject *o, PyObject *name, long long *out) {
  PyObject *v = PyObject_GetAttr(o, name);       /* a name its caller declared */
  if (!v) {
    PyErr_Clear();
    return 0;
  }
  int ok = as_size(v, out);
  Py_DECREF(v);
  return ok;
}

/* Whether the attribute is falsy (0 when it is truthy, missing or fails). */
static int attr_false(PyObject *o, PyObject *name) {
  PyObject *v = PyObject_GetAttr(o, name);       /* a name its caller declared */
  if (!v) {
    PyErr_Clear();
    return 0;
  }
  int r = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (r < 0)
    PyErr_Clear();
  return r == 0;
}

/* Whether nothing is pinned on the plugin (PinnedMap._starts empty): a copy has no pinned
 * piece and a new mapping takes no pin reference. 0 on any doubt (error cleared). */
static int nothing_pinned(Accel *a) {
  PyObject *pinned = PyObject_GetAttr(R(a, PLUGIN), s_pinned);
  int none = pinned && attr_false(pinned, s_starts);
  Py_XDECREF(pinned);
  PyErr_Clear();
  return none;
}

/* Whether a copy of n bytes (to the device, or from it) is one memcpy now: nothing
 * pinned on the plugin (so no piece to split off, no pin to take for a mapping), and
 * not one the plugin stages. */
static int memcpy_now(Accel *a, Py_ssize_t n, int to_device) {
  Py_ssize_t stage = a->stage[to_device ? 0 : 1];
  return (stage < 0 || n < stage) && nothing_pinned(a);
}

/* stats[key] += n (0, or -1 with an exception). */
static int add_count(Accel *a, PyObject *key, Py_ssize_t n) {
  PyObject *was = PyDict_GetItemWithError(R(a, STATS), key);
  if (!was)
    return PyErr_Occurred() ? -1 : 0;
  PyObject *add = PyLong_FromSsize_t(n);
  PyObject *sum = add ? PyNumber_Add(was, add) : NULL;
  Py_XDECREF(add);
  if (!sum)
    return -1;
  int rc = PyDict_SetItem(R(a, STATS), key, sum);
  Py_DECREF(sum);
  return rc;
}

/* n bytes by the route `key` names, and one operation by it (GenericDevice.count) */
static int add_stat(Accel *a, PyObject *key, Py_ssize_t n);

/* n bytes staged (through a pinned buffer) to the device or from it: counted as unpinned
 * and as staged, bytes and one operation (0, or -1 with an exception). */
static int add_staged(Accel *a, int to_device, Py_ssize_t n) {
  return add_stat(a, to_device ? s_to_unpinned : s_from_unpinned, n) < 0 ||
                 add_count(a, to_device ? s_to_staged : s_from_staged, n) < 0 ||
                 add_count(a, to_device ? s_to_staged_ops : s_from_staged_ops, 1) < 0
             ? -1 : 0;
}

/* n bytes by the route `key` names, and one operation by it (GenericDevice.count) */
static int add_stat(Accel *a, PyObject *key, Py_ssize_t n) {
  PyObject *ops = key == s_to_pinned ? s_to_pinned_ops : key == s_from_pinned ? s_from_pinned_ops
                  : key == s_to_unpinned ? s_to_unpinned_ops : s_from_unpinned_ops;
  return add_count(a, key, n) < 0 ? -1 : add_count(a, ops, 1);
}

/* Index of the first start > p in the sorted list of ints (bisect_right); -1 when a
 * start is not an address. */
static Py_ssize_t bisect_right(PyObject *starts, uintptr_t p) {
  Py_ssize_t lo = 0, hi = PyList_GET_SIZE(starts);
  while (lo < hi) {
    Py_ssize_t mid = (lo + hi) / 2;
    uintptr_t v;
    if (!as_addr(PyList_GET_ITEM(starts, mid), &v))
      return -1;
    if (p < v)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* The Python method, called with the same arguments. */
static PyObject *fallback(Accel *a, int which, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
  PyObject *all[8];
  Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  if (total > 7) {
    PyErr_SetString(PyExc_TypeError, "begin_single_range/end_single_range: too many arguments");
    return NULL;
  }
  all[0] = R(a, TABLE);
  for (Py_ssize_t i = 0; i < total; i++)
    all[i + 1] = args[i];
  return PyObject_Vectorcall(R(a, which), all, (size_t)nargs + 1, kwnames);
}

/* The range arguments (p, n, t) of both calls: exact ints, 0 < n, t of TO/FROM
 * bits only, on a table not observed (MappingTable.observed). 0 when not. */
static int range_args(Accel *a, PyObject *const *args, uintptr_t *p, Py_ssize_t *n, long *t) {
  long long nn, tt;
  if (!as_addr(args[0], p) || !as_size(args[1], &nn) || !as_size(args[2], &tt))
    return 0;
  if (nn <= 0 || (tt & ~3LL) || *p + (uintptr_t)nn < *p)
    return 0;
  if (a->core->observed)                        /* INFO bits or a listener */
    return 0;
  *n = (Py_ssize_t)nn;
  *t = (long)tt;
  return 1;
}

