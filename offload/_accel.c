/* offload's accelerator: MappingTable.begin_plain / end_plain for devices whose memory is
 * host memory (the host plugin), in one C call each.
 *
 * It works on the Python table's own structures (the _by_start dict, the sorted _starts
 * and _entries lists, HostDataToTarget objects) and the device's allocation records and
 * pool, so the Python code stays the owner of every rule: whenever a case is not the
 * plain one (an overlap, an entry being made or in use by others, a waiter, pinned
 * memory, a pool without a block of the size, a lock held by another thread), it calls
 * the Python method instead, having changed nothing. Locks are the table's and the
 * device's own threading locks, taken without blocking. Copies up to `limit` bytes are a
 * memcpy under the table lock; larger ones run as the Python methods run them, outside
 * it and without the GIL: a new mapping is in the table with its `ready` lock held until
 * its first copy is done, and a mapping's last copy back runs after it left the table
 * (then MappingTable._release frees it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include <pythread.h>

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

static int lock_take(Lock *l) {                 /* without blocking: 1 taken, 0 held */
  if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK))
    return 0;
  l->held = 1;
  return 1;
}

static void lock_give(Lock *l) {
  l->held = 0;
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
  return PyBool_FromLong(lock_wait(l, us));
}

static PyObject *Lock_enter(Lock *l, PyObject *unused) {
  (void)unused;
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

/* Slots of HostDataToTarget, by their offsets in the object. */
enum { HST_BEGIN, HST_END, HST_BASE, TGT_BEGIN, DYN, HOLD, OWNER, NAME, PINNED, OWNED, READY,
       FAILED, WHERE_, BUSY, VIEWS, SHADOWS, NSLOTS };
static const char *slot_names[NSLOTS] = {
    "hst_begin", "hst_end", "hst_base", "tgt_begin", "dyn", "hold", "owner", "name", "pinned",
    "owned", "ready", "failed", "where", "busy", "views", "shadows"};

/* Objects the table and device keep for their lifetime (they change them in place). */
enum { TABLE, DEV, PLUGIN, ENTRY_TYPE, KIND, NEW_LOCK, WHERE, BEGIN_PY, END_PY, ACQUIRE,
       RELEASE, BY_START, STARTS, ENTRIES, DEV_ACQUIRE, DEV_RELEASE, ALLOCS, POOL, POOL_FREE,
       STATS, RELEASE_PY, UPDATE_PY, IDLE, POLL, CHECK, DRV, STREAMS, NREFS };

/* How update copies run in C: memcpy (host memory), or a CUDA copy of a pinned range
 * enqueued and spun on through the driver's entry points (the GIL released). */
enum { COPY_NONE, COPY_MEMCPY, COPY_CUDA };
#define MAX_STREAMS 8
typedef int (*set_ctx_t)(void *);
typedef int (*cu_copy_t)(uintptr_t, uintptr_t, size_t, void *);
typedef int (*query_t)(void *);
#define CU_NOT_READY 600

typedef struct {
  int kind;
  uintptr_t set_ctx, ctx, h2d, d2h, query, launch;
  double spin;                     /* seconds spun on the stream before Python polls */
  int nstreams;
  uintptr_t stream[MAX_STREAMS];
  char taken[MAX_STREAMS];
  long device;                     /* the plugin-local device id (PinnedEntry.dev key) */
  long long split;                 /* the plugin's pin_split grid (0: none) */
} Copier;

typedef struct {
  PyObject_HEAD
  PyObject *ref[NREFS];
  Py_ssize_t off[NSLOTS];
  Py_ssize_t limit;       /* largest copy made under the table lock */
  Py_ssize_t stage;       /* the plugin's staging threshold (-1: none) */
  Copier copier;
  Lock *tlock, *dlock;    /* the table's and the device's locks, when of our type */
} Accel;

#define R(a, i) ((a)->ref[i])
static PyObject *ndarray_type;
static int plain_buffer(PyObject *arr, long t, uintptr_t *pp, Py_ssize_t *np_, int *rop);
#define SLOT(a, o, i) (*(PyObject **)((char *)(o) + (a)->off[i]))
#define IS_ENTRY(a, o) (Py_TYPE(o) == (PyTypeObject *)R(a, ENTRY_TYPE))

static PyObject *s_acquire, *s_release;
static PyObject *s_info, *s_waiting, *s_bytes, *s_limit, *s_alloc_starts,
    *s_wait_before_reuse, *s_pinned, *s_starts, *s_to_unpinned, *s_from_unpinned, *s_locked,
    *s_copy_back, *s_busy_attr, *s_dead, *s_lock_attr, *s_entries_attr, *s_host, *s_size,
    *s_pending, *s_dev, *s_notify_all, *s_to_pinned, *s_from_pinned, *s_last_kernel,
    *s_h2d_name, *s_d2h_name;

static int try_lock(PyObject *acquire);
static void unlock(PyObject *release);

/* The table's lock (t) or the device's (!t): taken without blocking (1, else 0), taken
 * waiting (1, else -1 with an exception), given back. */
static int hold_try(Accel *a, int t) {
  Lock *l = t ? a->tlock : a->dlock;
  return l ? lock_take(l) : try_lock(R(a, t ? ACQUIRE : DEV_ACQUIRE));
}

static int hold_wait(Accel *a) {
  if (a->tlock)
    return lock_wait(a->tlock, -1);
  PyObject *r = PyObject_CallNoArgs(R(a, ACQUIRE));
  if (!r)
    return -1;
  Py_DECREF(r);
  return 1;
}

static void hold_give(Accel *a, int t) {
  Lock *l = t ? a->tlock : a->dlock;
  if (l)
    lock_give(l);
  else
    unlock(R(a, t ? RELEASE : DEV_RELEASE));
}

/* Store v (a new reference, stolen) in slot i of o; the old value goes to *old, else is
 * dropped. */
static void put(Accel *a, PyObject *o, int i, PyObject *v, PyObject **old) {
  PyObject **p = &SLOT(a, o, i);
  PyObject *was = *p;
  *p = v;
  if (old)
    *old = was;
  else
    Py_XDECREF(was);
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

/* An exact int as an address; 0 (error cleared) for anything else. */
static int as_addr(PyObject *o, uintptr_t *out) {
  if (o == NULL || !PyLong_CheckExact(o))
    return 0;
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  *out = (uintptr_t)v;
  return 1;
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
  PyObject *v = PyObject_GetAttr(o, name);
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
  PyObject *v = PyObject_GetAttr(o, name);
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

/* Whether a copy of n bytes is one plain memcpy now: nothing pinned on the plugin (so
 * no piece to split off, no pin to take for a mapping), below the staging threshold. */
static int plain_copy(Accel *a, Py_ssize_t n) {
  if (a->stage >= 0 && n >= a->stage)
    return 0;
  PyObject *pinned = PyObject_GetAttr(R(a, PLUGIN), s_pinned);
  if (!pinned) {
    PyErr_Clear();
    return 0;
  }
  int r = attr_false(pinned, s_starts);
  Py_DECREF(pinned);
  return r;
}

/* stats[key] += n (0, or -1 with an exception). */
static int add_stat(Accel *a, PyObject *key, Py_ssize_t n) {
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
    PyErr_SetString(PyExc_TypeError, "begin_plain/end_plain: too many arguments");
    return NULL;
  }
  all[0] = R(a, TABLE);
  for (Py_ssize_t i = 0; i < total; i++)
    all[i + 1] = args[i];
  return PyObject_Vectorcall(R(a, which), all, (size_t)nargs + 1, kwnames);
}

/* The plain arguments (p, n, t) of both calls: exact ints, 0 < n, t of TO/FROM
 * bits only, on a table without INFO. 0 when not. */
static int plain_args(Accel *a, PyObject *const *args, uintptr_t *p, Py_ssize_t *n, long *t) {
  long long nn, tt, info;
  if (!as_addr(args[0], p) || !as_size(args[1], &nn) || !as_size(args[2], &tt))
    return 0;
  if (nn <= 0 || (tt & ~3LL) || *p + (uintptr_t)nn < *p)
    return 0;
  if (!attr_size(R(a, TABLE), s_info, &info) || info)
    return 0;
  *n = (Py_ssize_t)nn;
  *t = (long)tt;
  return 1;
}

/* begin_plain(p, n, t, owner, read_only=False, busy=None), as MappingTable.begin_plain. */
static PyObject *Accel_begin(Accel *a, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  uintptr_t p;
  Py_ssize_t n;
  long t;
  if (kwnames || nargs < 4 || nargs > 6 || !plain_args(a, args, &p, &n, &t))
    return fallback(a, BEGIN_PY, args, nargs, kwnames);
  PyObject *po = args[0], *no = args[1], *owner = args[3];
  PyObject *busy = nargs > 5 ? args[5] : Py_None;
  if (busy != Py_None && !PyList_CheckExact(busy))
    return fallback(a, BEGIN_PY, args, nargs, kwnames);
  if (!hold_try(a, 1))
    return fallback(a, BEGIN_PY, args, nargs, kwnames);
  PyObject *by_start = R(a, BY_START), *starts = R(a, STARTS), *entries = R(a, ENTRIES);
  PyObject *result = NULL, *one = NULL;
  int dev_locked = 0;

  PyObject *e = PyDict_GetItemWithError(by_start, po);
  if (e) {                                       /* present: a reference, no copy */
    uintptr_t end;
    if (!IS_ENTRY(a, e) || !as_addr(SLOT(a, e, HST_END), &end) || p + (uintptr_t)n > end ||
        !made(SLOT(a, e, READY)))
      goto slow;
    one = PyLong_FromLong(1);
    PyObject *dyn = one ? PyNumber_Add(SLOT(a, e, DYN), one) : NULL;
    PyObject *nbusy = one && busy != Py_None ? PyNumber_Add(SLOT(a, e, BUSY), one) : NULL;
    if (!dyn || (busy != Py_None && (!nbusy || PyList_Append(busy, e) < 0))) {
      Py_XDECREF(dyn);
      Py_XDECREF(nbusy);
      goto done;
    }
    put(a, e, DYN, dyn, NULL);
    if (nbusy)
      put(a, e, BUSY, nbusy, NULL);
    result = SLOT(a, e, TGT_BEGIN);
    Py_INCREF(result);
    goto done;
  }
  if (PyErr_Occurred())
    goto slow;
  /* a new entry: nothing may overlap [p, p+n) */
  Py_ssize_t i = bisect_right(starts, p) - 1, count = PyList_GET_SIZE(starts);
  if (i < -1 || count != PyList_GET_SIZE(entries))
    goto slow;
  if (i >= 0) {
    uintptr_t end;
    PyObject *prev = PyList_GET_ITEM(entries, i);
    if (!IS_ENTRY(a, prev) || !as_addr(SLOT(a, prev, HST_END), &end) || p < end)
      goto slow;
  }
  if (i + 1 < count) {
    uintptr_t next;
    if (!as_addr(PyList_GET_ITEM(starts, i + 1), &next) || next < p + (uintptr_t)n)
      goto slow;
  }
  if (!plain_copy(a, n))
    goto slow;
  /* a block of n bytes from the device's pool (GenericDevice.alloc's first step) */
  if (!(dev_locked = hold_try(a, 0)))
    goto slow;
  PyObject *blocks = PyDict_GetItemWithError(R(a, POOL_FREE), no);
  Py_ssize_t nb = blocks && PyList_CheckExact(blocks) ? PyList_GET_SIZE(blocks) : 0;
  uintptr_t tgt;
  long long bytes;
  if (!nb || !as_addr(PyList_GET_ITEM(blocks, nb - 1), &tgt) || !tgt ||
      !attr_size(R(a, POOL), s_bytes, &bytes))
    goto slow;
  PyObject *addr = PyList_GET_ITEM(blocks, nb - 1);
  Py_INCREF(addr);
  PyObject *rec = Py_BuildValue("(nO)", n, R(a, KIND));
  PyObject *left = PyLong_FromLongLong(bytes - n);
  int bad = !rec || !left || PyDict_SetItem(R(a, ALLOCS), addr, rec) < 0 ||
            PyObject_SetAttr(R(a, POOL), s_bytes, left) < 0 ||
            PyList_SetSlice(blocks, nb - 1, nb, NULL) < 0 ||
            PyObject_SetAttr(R(a, DEV), s_alloc_starts, Py_None) < 0;
  Py_XDECREF(rec);
  Py_XDECREF(left);
  hold_give(a, 0);
  dev_locked = 0;
  if (bad) {
    Py_DECREF(addr);
    goto done;
  }
  /* the entry, as HostDataToTarget(p, n, 0, None, owner) with dyn = 1; a large first
   * copy runs outside the lock, the entry's `ready` lock held until it is done */
  int big = n > a->limit;
  PyObject *ready = Py_None, *got = NULL;
  if (big) {
    ready = PyObject_CallNoArgs(R(a, NEW_LOCK));
    got = ready ? PyObject_CallMethodNoArgs(ready, s_acquire) : NULL;
    if (!got) {
      Py_XDECREF(ready);
      Py_DECREF(addr);
      goto done;         /* (the block is recorded as allocated: only on memory errors) */
    }
    Py_DECREF(got);
  } else {
    Py_INCREF(ready);
  }
  PyTypeObject *tp = (PyTypeObject *)R(a, ENTRY_TYPE);
  PyObject *ent = tp->tp_alloc(tp, 0);
  PyObject *end = PyLong_FromUnsignedLongLong((unsigned long long)(p + (uintptr_t)n));
  PyObject *dyn = PyLong_FromLong(1), *hold = PyLong_FromLong(0);
  PyObject *nbusy = PyLong_FromLong(busy != Py_None);
  if (!ent || !end || !dyn || !hold || !nbusy) {
    Py_XDECREF(ent); Py_XDECREF(end); Py_XDECREF(dyn); Py_XDECREF(hold); Py_XDECREF(nbusy);
    Py_DECREF(addr);
    Py_DECREF(ready);
    goto done;
  }
  Py_INCREF(po); put(a, ent, HST_BEGIN, po, NULL);
  put(a, ent, HST_END, end, NULL);
  Py_INCREF(po); put(a, ent, HST_BASE, po, NULL);
  Py_INCREF(addr); put(a, ent, TGT_BEGIN, addr, NULL);
  put(a, ent, DYN, dyn, NULL);
  put(a, ent, HOLD, hold, NULL);
  Py_INCREF(owner); put(a, ent, OWNER, owner, NULL);
  Py_INCREF(Py_None); put(a, ent, NAME, Py_None, NULL);
  Py_INCREF(Py_False); put(a, ent, PINNED, Py_False, NULL);
  Py_INCREF(Py_True); put(a, ent, OWNED, Py_True, NULL);
  Py_INCREF(ready); put(a, ent, READY, ready, NULL);
  Py_INCREF(Py_False); put(a, ent, FAILED, Py_False, NULL);
  Py_INCREF(R(a, WHERE)); put(a, ent, WHERE_, R(a, WHERE), NULL);
  put(a, ent, BUSY, nbusy, NULL);
  Py_INCREF(Py_None); put(a, ent, VIEWS, Py_None, NULL);
  Py_INCREF(Py_None); put(a, ent, SHADOWS, Py_None, NULL);
  if (PyList_Insert(starts, i + 1, po) < 0 || PyList_Insert(entries, i + 1, ent) < 0 ||
      PyDict_SetItem(by_start, po, ent) < 0 ||
      (busy != Py_None && PyList_Append(busy, ent) < 0)) {
    Py_DECREF(ent);
    Py_DECREF(addr);
    Py_DECREF(ready);
    goto done;
  }
  Py_DECREF(ent);
  if (big) {
    hold_give(a, 1);                       /* others wait on `ready` meanwhile */
    if (t & 1) {
      Py_BEGIN_ALLOW_THREADS
      memcpy((void *)tgt, (const void *)p, (size_t)n);
      Py_END_ALLOW_THREADS
    }
    int bad = (t & 1) && add_stat(a, s_to_unpinned, n) < 0;
    unlock_lock(ready);
    Py_DECREF(ready);
    if (bad) {
      Py_DECREF(addr);
      return NULL;
    }
    return addr;
  }
  Py_DECREF(ready);
  if (t & 1) {                                   /* TO */
    memcpy((void *)tgt, (const void *)p, (size_t)n);
    if (add_stat(a, s_to_unpinned, n) < 0) {
      Py_DECREF(addr);
      goto done;
    }
  }
  result = addr;
  goto done;

slow:
  PyErr_Clear();
  if (dev_locked)
    hold_give(a, 0);
  hold_give(a, 1);
  Py_XDECREF(one);
  return fallback(a, BEGIN_PY, args, nargs, kwnames);
done:
  if (dev_locked)
    hold_give(a, 0);
  hold_give(a, 1);
  Py_XDECREF(one);
  return result;
}

/* end_plain(p, n, t, owner, e=None, copy_back=True), as MappingTable.end_plain. */
static PyObject *Accel_end(Accel *a, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject *mine = Py_None, *copy_back = Py_True;
  uintptr_t p;
  Py_ssize_t n;
  long t;
  if (nargs < 4 || nargs > 6 || !plain_args(a, args, &p, &n, &t))
    return fallback(a, END_PY, args, nargs, kwnames);
  if (nargs > 4)
    mine = args[4];
  if (nargs > 5)
    copy_back = args[5];
  if (kwnames) {
    if (PyTuple_GET_SIZE(kwnames) != 1 || nargs != 5 ||
        PyTuple_GET_ITEM(kwnames, 0) != s_copy_back)
      return fallback(a, END_PY, args, nargs, kwnames);
    copy_back = args[5];
  }
  int back = PyObject_IsTrue(copy_back);
  if (back < 0)
    return NULL;
  long own = mine != Py_None;
  if (!hold_try(a, 1))
    return fallback(a, END_PY, args, nargs, kwnames);
  PyObject *by_start = R(a, BY_START), *starts = R(a, STARTS), *entries = R(a, ENTRIES);
  PyObject *po = args[0], *result = NULL, *gone_owner = NULL, *keep = NULL;
  int dev_locked = 0;

  PyObject *f = PyDict_GetItemWithError(by_start, po);
  uintptr_t end;
  long long dyn, busy, hold = 0;
  if (!f || !IS_ENTRY(a, f) || (own && f != mine) || !as_addr(SLOT(a, f, HST_END), &end) ||
      p + (uintptr_t)n > end || !as_size(SLOT(a, f, DYN), &dyn) ||
      !as_size(SLOT(a, f, BUSY), &busy) || dyn < 1 || busy != own || !made(SLOT(a, f, READY)))
    goto slow;
  if (own && !attr_false(R(a, TABLE), s_waiting))
    goto slow;                              /* someone waits for it: Python notifies */
  int last = as_size(SLOT(a, f, HOLD), &hold) && dyn - 1 + hold == 0;
  Py_ssize_t at = -1, size = 0;
  uintptr_t tgt = 0;
  PyObject *blocks = NULL, *key = NULL;
  if (last) {                       /* the copy back and the free must be plain ones */
    if (SLOT(a, f, SHADOWS) != Py_None || SLOT(a, f, PINNED) != Py_False ||
        SLOT(a, f, OWNED) != Py_True || !as_addr(key = SLOT(a, f, TGT_BEGIN), &tgt) || !tgt ||
        (at = bisect_right(starts, p) - 1) < 0 || PyList_GET_ITEM(entries, at) != f ||
        !plain_copy(a, n) || !attr_false(R(a, DEV), s_wait_before_reuse))
      goto slow;
  }
  int big = last && n > a->limit;        /* copied back outside the locks, then released */
  if (last && !big) {
    long long limit, bytes, sz;
    if (!(dev_locked = hold_try(a, 0)))
      goto slow;
    PyObject *rec = PyDict_GetItemWithError(R(a, ALLOCS), key);
    if (!rec || !PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 2 ||
        PyTuple_GET_ITEM(rec, 1) != R(a, KIND) || !as_size(PyTuple_GET_ITEM(rec, 0), &sz) ||
        !attr_size(R(a, POOL), s_limit, &limit) || !attr_size(R(a, POOL), s_bytes, &bytes) ||
        sz <= 0 || sz > limit || bytes + sz > limit)
      goto slow;                          /* the pool keeps no more: Python frees it */
    size = (Py_ssize_t)sz;
    blocks = PyDict_GetItemWithError(R(a, POOL_FREE), PyTuple_GET_ITEM(rec, 0));
    if ((blocks && !PyList_CheckExact(blocks)) || PyErr_Occurred())
      goto slow;
  }
  /* every check passed: the changes */
  PyObject *ndyn = PyLong_FromLongLong(dyn - 1), *zero = own ? PyLong_FromLong(0) : NULL;
  if (!ndyn || (own && !zero)) {
    Py_XDECREF(ndyn);
    goto done;
  }
  put(a, f, DYN, ndyn, NULL);
  if (own)
    put(a, f, BUSY, zero, NULL);
  if (big) {
    Py_INCREF(f);
    int bad = PyList_SetSlice(starts, at, at + 1, NULL) < 0 ||
              PyList_SetSlice(entries, at, at + 1, NULL) < 0 ||
              PyDict_DelItem(by_start, po) < 0;
    hold_give(a, 1);
    if (!bad && back && (t & 2)) {
      Py_BEGIN_ALLOW_THREADS
      memcpy((void *)p, (const void *)tgt, (size_t)n);
      Py_END_ALLOW_THREADS
      bad = add_stat(a, s_from_unpinned, n) < 0;
    }
    PyObject *err = NULL, *typ = NULL, *tb = NULL;
    if (bad)
      PyErr_Fetch(&typ, &err, &tb);
    PyObject *call[2] = {R(a, TABLE), f};      /* MappingTable._release: free, unpin */
    PyObject *r = PyObject_Vectorcall(R(a, RELEASE_PY), call, 2, NULL);
    Py_DECREF(f);
    if (bad) {
      Py_XDECREF(r);
      PyErr_Restore(typ, err, tb);
      return NULL;
    }
    if (!r)
      return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
  }
  if (last) {
    keep = f;                                    /* ours until the end */
    Py_INCREF(keep);
    Py_INCREF(key);
    int bad = PyList_SetSlice(starts, at, at + 1, NULL) < 0 ||
              PyList_SetSlice(entries, at, at + 1, NULL) < 0 ||
              PyDict_DelItem(by_start, po) < 0;
    if (!bad && back && (t & 2)) {               /* FROM */
      memcpy((void *)p, (const void *)tgt, (size_t)n);
      bad = add_stat(a, s_from_unpinned, n) < 0;
    }
    PyObject *sz = PyLong_FromSsize_t(size);
    long long bytes = 0;
    PyObject *nbytes = sz && attr_size(R(a, POOL), s_bytes, &bytes)
                           ? PyLong_FromLongLong(bytes + size) : NULL;
    bad = bad || !sz || !nbytes || PyDict_DelItem(R(a, ALLOCS), key) < 0 ||
          PyObject_SetAttr(R(a, DEV), s_alloc_starts, Py_None) < 0;
    if (!bad && blocks) {
      bad = PyList_Append(blocks, key) < 0;
    } else if (!bad) {
      PyObject *fresh = PyList_New(1);
      bad = !fresh;
      if (fresh) {
        Py_INCREF(key);
        PyList_SET_ITEM(fresh, 0, key);
        bad = PyDict_SetItem(R(a, POOL_FREE), sz, fresh) < 0;
        Py_DECREF(fresh);
      }
    }
    if (!bad)
      bad = PyObject_SetAttr(R(a, POOL), s_bytes, nbytes) < 0;
    Py_XDECREF(sz);
    Py_XDECREF(nbytes);
    Py_DECREF(key);
    Py_INCREF(Py_None);
    put(a, f, OWNER, Py_None, &gone_owner);     /* dropped after the locks */
    if (bad)
      goto done;
  }
  Py_INCREF(Py_None);
  result = Py_None;
  goto done;

slow:
  PyErr_Clear();
  if (dev_locked)
    hold_give(a, 0);
  hold_give(a, 1);
  return fallback(a, END_PY, args, nargs, kwnames);
done:
  if (dev_locked)
    hold_give(a, 0);
  hold_give(a, 1);
  Py_XDECREF(gone_owner);
  Py_XDECREF(keep);
  return result;
}


#include <time.h>
static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The device-accessible address of [p, p+n) when one pinned entry of the plugin holds it
 * for this device (not being pinned or unpinned, not crossing the pin_split grid):
 * PinnedMap.translate's one-piece answer. 0 when not (or on any doubt). */
static uintptr_t pinned_via(Accel *a, uintptr_t p, Py_ssize_t n) {
  Copier *c = &a->copier;
  if (c->split > 0 && p / (uintptr_t)c->split != (p + n - 1) / (uintptr_t)c->split)
    return 0;
  PyObject *pinned = PyObject_GetAttr(R(a, PLUGIN), s_pinned);
  if (!pinned) {
    PyErr_Clear();
    return 0;
  }
  uintptr_t via = 0;
  PyObject *lock = PyObject_GetAttr(pinned, s_lock_attr), *starts = NULL, *entries = NULL;
  PyObject *acquire = NULL;
  int ours = lock && Py_IS_TYPE(lock, &LockType);
  if (ours ? !lock_take((Lock *)lock)
           : !(acquire = lock ? PyObject_GetAttr(lock, s_acquire) : NULL) || !try_lock(acquire))
    goto out_nolock;
  starts = PyObject_GetAttr(pinned, s_starts);
  entries = PyObject_GetAttr(pinned, s_entries_attr);
  if (starts && entries && PyList_CheckExact(starts) && PyList_CheckExact(entries) &&
      PyList_GET_SIZE(starts) == PyList_GET_SIZE(entries)) {
    Py_ssize_t i = bisect_right(starts, p) - 1;
    if (i >= 0) {
      PyObject *e = PyList_GET_ITEM(entries, i);
      PyObject *host = PyObject_GetAttr(e, s_host), *size = PyObject_GetAttr(e, s_size);
      PyObject *pending = PyObject_GetAttr(e, s_pending), *devs = PyObject_GetAttr(e, s_dev);
      uintptr_t h;
      long long sz;
      if (host && size && pending == Py_None && devs && PyDict_CheckExact(devs) &&
          as_addr(host, &h) && as_size(size, &sz) && p + (uintptr_t)n <= h + (uintptr_t)sz) {
        PyObject *key = PyLong_FromLong(c->device);
        PyObject *addr = key ? PyDict_GetItemWithError(devs, key) : NULL;
        uintptr_t base;
        if (addr && as_addr(addr, &base) && base)
          via = base + (p - h);
        Py_XDECREF(key);
      }
      Py_XDECREF(host); Py_XDECREF(size); Py_XDECREF(pending); Py_XDECREF(devs);
    }
  }
  if (ours)
    lock_give((Lock *)lock);
  else
    unlock_lock(lock);
out_nolock:
  PyErr_Clear();
  Py_XDECREF(starts); Py_XDECREF(entries); Py_XDECREF(acquire); Py_XDECREF(lock);
  Py_DECREF(pinned);
  return via;
}

/* What one CUDA operation enqueues: a copy or a kernel launch (run without the GIL). */
typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void *, void **, void **);
typedef struct {
  int launch;                      /* 0: copy(dst, src, size), 1: launch */
  cu_copy_t copy;
  uintptr_t dst, src;
  size_t size;
  void *fn;
  unsigned grid, block, shared;
  void **params;
} CuWork;

/* Whether the copier may run work now: the context alive (CUDADriver.alive()). */
static int cuda_alive(Accel *a) {
  PyObject *dead = PyObject_GetAttr(R(a, DRV), s_dead);
  if (!dead) {
    PyErr_Clear();
    return 0;
  }
  Py_DECREF(dead);
  return dead == Py_None;                      /* else Python raises the sticky error */
}

/* Run `w` on a free stream of the copier and wait for it, as the one-call paths of
 * CUDADevice do: the context made current, the work enqueued and spun on with the GIL
 * released, a longer wait polled by Python (Ctrl-C works), an error raised by the
 * driver's check as `what`'s. 1 done, 0 no free stream (nothing done), -1 an exception. */
static int on_stream(Accel *a, const CuWork *w, PyObject *what) {
  Copier *c = &a->copier;
  int s = -1;
  for (int i = 0; i < c->nstreams; i++)
    if (!c->taken[i]) {
      s = i;
      break;
    }
  if (s < 0)
    return 0;
  c->taken[s] = 1;                             /* under the GIL: ours alone */
  void *stream = (void *)c->stream[s];
  query_t query = (query_t)c->query;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ((set_ctx_t)c->set_ctx)((void *)c->ctx);
  if (rc == 0)
    rc = w->launch ? ((cu_launch_t)c->launch)(w->fn, w->grid, 1, 1, w->block, 1, 1, w->shared,
                                              stream, w->params, NULL)
                   : w->copy(w->dst, w->src, w->size, stream);
  if (rc == 0 && (rc = query(stream)) == CU_NOT_READY) {
    double until = seconds() + c->spin;
    while ((rc = query(stream)) == CU_NOT_READY && seconds() < until)
      ;
  }
  Py_END_ALLOW_THREADS
  if (rc == CU_NOT_READY) {
    PyObject *call[2] = {PyTuple_GET_ITEM(R(a, STREAMS), s), NULL};
    PyObject *r = PyObject_Vectorcall(R(a, POLL), call, 1, NULL);
    if (!r)
      return -1;                               /* interrupted: the stream stays out */
    rc = (int)PyLong_AsLong(r);
    Py_DECREF(r);
    if (rc == -1 && PyErr_Occurred())
      return -1;
  }
  c->taken[s] = 0;
  if (rc) {
    PyObject *code = PyLong_FromLong(rc);
    PyObject *call[2] = {code, what};
    PyObject *r = code ? PyObject_Vectorcall(R(a, CHECK), call, 2, NULL) : NULL;
    Py_XDECREF(code);
    if (!r)
      return -1;
    Py_DECREF(r);
  }
  return 1;
}

/* One update copy of n bytes between host p and device tgt: 1 done, 0 not here (nothing
 * done: the caller takes the Python path), -1 an exception. */
static int copy_now(Accel *a, int to_device, uintptr_t tgt, uintptr_t p, Py_ssize_t n) {
  Copier *c = &a->copier;
  if (c->kind == COPY_MEMCPY) {
    if (!plain_copy(a, n))
      return 0;
    void *dst = (void *)(to_device ? tgt : p);
    const void *src = (const void *)(to_device ? p : tgt);
    if (n > a->limit) {
      Py_BEGIN_ALLOW_THREADS
      memcpy(dst, src, (size_t)n);
      Py_END_ALLOW_THREADS
    } else {
      memcpy(dst, src, (size_t)n);
    }
    return add_stat(a, to_device ? s_to_unpinned : s_from_unpinned, n) < 0 ? -1 : 1;
  }
  if (c->kind != COPY_CUDA)
    return 0;
  if (!cuda_alive(a) || !pinned_via(a, p, n))
    return 0;
  CuWork w = {0, (cu_copy_t)(to_device ? c->h2d : c->d2h), to_device ? tgt : p,
              to_device ? p : tgt, (size_t)n, NULL, 0, 0, 0, NULL};
  PyObject *what = to_device ? s_h2d_name : s_d2h_name;
  int done = on_stream(a, &w, what);
  if (done <= 0)
    return done;
  return add_stat(a, to_device ? s_to_pinned : s_from_pinned, n) < 0 ? -1 : 1;
}

/* Launch kernel `spec` = (function, grid, block, shared bytes, parameter sizes, name, what)
 * with the integer arguments `kargs` on one of the copier's streams and wait, as
 * CUDADevice._launch_impl's one-call path: 1 done, 0 not here (nothing done), -1 an
 * exception. */
static int launch_now(Accel *a, PyObject *spec, PyObject *kargs) {
  Copier *c = &a->copier;
  unsigned long long fn;
  unsigned grid, block, shared;
  PyObject *sizes, *name, *what;
  if (c->kind != COPY_CUDA || !c->launch ||
      !PyArg_ParseTuple(spec, "KIIIO!UU", &fn, &grid, &block, &shared, &PyTuple_Type, &sizes,
                        &name, &what)) {
    PyErr_Clear();
    return 0;
  }
  Py_ssize_t count = PyList_GET_SIZE(kargs);
  if (count != PyTuple_GET_SIZE(sizes) || count > 32)
    return 0;
  uint64_t slot[32];
  void *param[32];
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject *v = PyList_GET_ITEM(kargs, i);
    long sz = PyLong_AsLong(PyTuple_GET_ITEM(sizes, i));
    if (!PyLong_CheckExact(v) || sz < 1 || sz > 8) {
      PyErr_Clear();
      return 0;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred() || (sz < 8 && (x >> (8 * sz)))) {
      PyErr_Clear();                            /* negative or too large: Python packs */
      return 0;
    }
    slot[i] = x;                                /* little-endian: the low sz bytes */
    param[i] = &slot[i];
  }
  if (!cuda_alive(a))
    return 0;
  if (PyObject_SetAttr(R(a, DRV), s_last_kernel, name) < 0)
    return -1;
  CuWork w = {1, NULL, 0, 0, 0, (void *)fn, grid, block, shared, count ? param : NULL};
  return on_stream(a, &w, what);
}

/* busy -= 1 on e under the table lock, waking waiters as release_busy does. */
static int release_one(Accel *a, PyObject *e) {
  if (hold_wait(a) < 0)                                        /* blocking, as Python */
    return -1;
  int rc = 0;
  PyObject *one = PyLong_FromLong(1);
  PyObject *busy = one ? PyNumber_Subtract(SLOT(a, e, BUSY), one) : NULL;
  Py_XDECREF(one);
  if (busy)
    put(a, e, BUSY, busy, NULL);
  else
    rc = -1;
  if (!attr_false(R(a, TABLE), s_waiting)) {
    PyObject *w = PyObject_CallMethodNoArgs(R(a, IDLE), s_notify_all);
    if (w)
      Py_DECREF(w);
    else
      rc = -1;
  }
  hold_give(a, 1);
  return rc;
}

/* update_plain(p, n, t): MappingTable.update_plain (target_data_update of one item over
 * [p, p+n), t = TO or FROM): absent data skipped, present data copied now. */
static PyObject *Accel_update(Accel *a, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  uintptr_t p;
  Py_ssize_t n;
  long t;
  if (kwnames || nargs != 3 || a->copier.kind == COPY_NONE || !plain_args(a, args, &p, &n, &t) ||
      (t != 1 && t != 2))
    return fallback(a, UPDATE_PY, args, nargs, kwnames);
  if (!hold_try(a, 1))
    return fallback(a, UPDATE_PY, args, nargs, kwnames);
  PyObject *e = PyDict_GetItemWithError(R(a, BY_START), args[0]);
  if (!e && !PyErr_Occurred()) {
    Py_ssize_t i = bisect_right(R(a, STARTS), p) - 1;
    if (i >= 0 && i < PyList_GET_SIZE(R(a, ENTRIES)))
      e = PyList_GET_ITEM(R(a, ENTRIES), i);
  }
  uintptr_t begin, end, tgt0;
  PyObject *one = NULL, *busy = NULL;
  if (!e || !IS_ENTRY(a, e) || !as_addr(SLOT(a, e, HST_BEGIN), &begin) ||
      !as_addr(SLOT(a, e, HST_END), &end) || p < begin || p + (uintptr_t)n > end ||
      !as_addr(SLOT(a, e, TGT_BEGIN), &tgt0) || !tgt0 || SLOT(a, e, SHADOWS) != Py_None ||
      !made(SLOT(a, e, READY)) || !(one = PyLong_FromLong(1)) ||
      !(busy = PyNumber_Add(SLOT(a, e, BUSY), one))) {
    Py_XDECREF(one);
    PyErr_Clear();
    hold_give(a, 1);
    return fallback(a, UPDATE_PY, args, nargs, kwnames);   /* absent data: Python too */
  }
  Py_DECREF(one);
  put(a, e, BUSY, busy, NULL);                 /* in use: an unmap waits for the copy */
  Py_INCREF(e);
  hold_give(a, 1);
  int done = copy_now(a, t == 1, tgt0 + (p - begin), p, n);
  PyObject *typ = NULL, *err = NULL, *tb = NULL;
  if (done < 0)
    PyErr_Fetch(&typ, &err, &tb);              /* the copy's error, raised after */
  int released = release_one(a, e);
  Py_DECREF(e);
  if (done < 0) {
    if (released < 0)
      PyErr_Clear();
    PyErr_Restore(typ, err, tb);
    return NULL;
  }
  if (released < 0)
    return NULL;
  if (done == 0)
    return fallback(a, UPDATE_PY, args, nargs, kwnames);
  Py_RETURN_NONE;
}


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
  long long info;
  if (!attr_size(R(a, TABLE), s_info, &info) || info)
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
      if (i >= 64 || plain_buffer(x, 0, &addr[i], &size[i], &ro) < 0 || !addr[i])
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
  if (!hold_try(a, 1))
    goto none;
  PyObject *starts = R(a, STARTS), *entries = R(a, ENTRIES);
  for (Py_ssize_t i = 0; i < count; i++) {
    if (PyList_GET_ITEM(kargs, i))
      continue;
    uintptr_t p = addr[i], end, begin, tgt;
    Py_ssize_t n = size[i] > 0 ? size[i] : 1;
    PyObject *key = PyLong_FromUnsignedLongLong((unsigned long long)p);
    PyObject *e = key ? PyDict_GetItemWithError(R(a, BY_START), key) : NULL;
    Py_XDECREF(key);
    if (!e && !PyErr_Occurred()) {                   /* the entry sharing a byte, if any */
      Py_ssize_t j = bisect_right(starts, p) - 1;
      if (j >= 0 && as_addr(SLOT(a, PyList_GET_ITEM(entries, j), HST_END), &end) && p < end)
        e = PyList_GET_ITEM(entries, j);
      else if (j + 1 < PyList_GET_SIZE(starts) &&
               as_addr(PyList_GET_ITEM(starts, j + 1), &begin) && begin < p + (uintptr_t)n)
        e = PyList_GET_ITEM(entries, j + 1);
    }
    PyObject *one = NULL, *busy = NULL, *dev_addr = NULL;
    if (!e || !IS_ENTRY(a, e) || !made(SLOT(a, e, READY)) ||
        !as_addr(SLOT(a, e, HST_BEGIN), &begin) || !as_addr(SLOT(a, e, TGT_BEGIN), &tgt) ||
        !(one = PyLong_FromLong(1)) || !(busy = PyNumber_Add(SLOT(a, e, BUSY), one)) ||
        !(dev_addr = PyLong_FromUnsignedLongLong(
              (unsigned long long)(tgt + (p - begin)))) ||
        PyList_Append(marked, e) < 0) {
      Py_XDECREF(one);
      Py_XDECREF(busy);
      Py_XDECREF(dev_addr);
      PyErr_Clear();
      for (Py_ssize_t m = 0; m < PyList_GET_SIZE(marked); m++) {   /* undo */
        PyObject *f = PyList_GET_ITEM(marked, m);
        PyObject *o1 = PyLong_FromLong(1);
        PyObject *less = o1 ? PyNumber_Subtract(SLOT(a, f, BUSY), o1) : NULL;
        Py_XDECREF(o1);
        if (less)
          put(a, f, BUSY, less, NULL);
      }
      PyErr_Clear();
      if (PyList_GET_SIZE(marked) && !attr_false(R(a, TABLE), s_waiting)) {
        PyObject *w = PyObject_CallMethodNoArgs(R(a, IDLE), s_notify_all);
        Py_XDECREF(w);
        PyErr_Clear();
      }
      hold_give(a, 1);
      goto none;
    }
    Py_DECREF(one);
    put(a, e, BUSY, busy, NULL);
    PyList_SET_ITEM(kargs, i, dev_addr);
  }
  hold_give(a, 1);
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
  if (hold_wait(a) < 0)                                        /* blocking, as Python */
    return NULL;
  int bad = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries) && !bad; i++) {
    PyObject *e = PyList_GET_ITEM(entries, i);
    PyObject *one = PyLong_FromLong(1);
    PyObject *less = one ? PyNumber_Subtract(SLOT(a, e, BUSY), one) : NULL;
    Py_XDECREF(one);
    if (less)
      put(a, e, BUSY, less, NULL);
    else
      bad = 1;
  }
  if (!bad && !attr_false(R(a, TABLE), s_waiting)) {
    PyObject *w = PyObject_CallMethodNoArgs(R(a, IDLE), s_notify_all);
    if (w)
      Py_DECREF(w);
    else
      bad = 1;
  }
  hold_give(a, 1);
  if (bad)
    return NULL;
  Py_RETURN_NONE;
}

/* update_arrays(to, from_): target_update's common call, one plain numpy array in all
 * (see plain_array), made as update_plain makes it: True; None when the lists hold
 * anything else (nothing done: the Python path). */
static PyObject *Accel_update_arrays(Accel *a, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
  if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "update_arrays(to, from_)");
    return NULL;
  }
  PyObject *to = args[0], *from = args[1];
  if (!(PyList_CheckExact(to) || PyTuple_CheckExact(to)) ||
      !(PyList_CheckExact(from) || PyTuple_CheckExact(from)) ||
      PySequence_Fast_GET_SIZE(to) + PySequence_Fast_GET_SIZE(from) != 1)
    Py_RETURN_NONE;
  long t = PySequence_Fast_GET_SIZE(to) ? 1 : 2;
  PyObject *arr = PySequence_Fast_GET_ITEM(t == 1 ? to : from, 0);
  uintptr_t p;
  Py_ssize_t n;
  int ro;
  if (Py_TYPE(arr) != (PyTypeObject *)ndarray_type || plain_buffer(arr, t, &p, &n, &ro) != 1)
    Py_RETURN_NONE;
  PyObject *argv[3] = {PyLong_FromUnsignedLongLong((unsigned long long)p),
                       PyLong_FromSsize_t(n), PyLong_FromLong(t)};
  PyObject *r = argv[0] && argv[1] && argv[2]
                    ? Accel_update(a, argv, 3, NULL) : NULL;
  Py_XDECREF(argv[0]); Py_XDECREF(argv[1]); Py_XDECREF(argv[2]);
  if (!r)
    return NULL;
  Py_DECREF(r);
  Py_RETURN_TRUE;
}

static int Accel_traverse(Accel *a, visitproc visit, void *arg) {
  for (int i = 0; i < NREFS; i++)
    Py_VISIT(a->ref[i]);
  return 0;
}

static int Accel_clear(Accel *a) {
  for (int i = 0; i < NREFS; i++)
    Py_CLEAR(a->ref[i]);
  return 0;
}

static void Accel_dealloc(Accel *a) {
  PyObject_GC_UnTrack(a);
  Accel_clear(a);
  PyObject_GC_Del(a);
}

static PyTypeObject AccelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "offload._accel_c.Accel",
    .tp_basicsize = sizeof(Accel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)Accel_dealloc,
    .tp_traverse = (traverseproc)Accel_traverse,
    .tp_clear = (inquiry)Accel_clear,
};

/* begin_plain or end_plain of one table: a callable bound to its Accel. */
typedef struct {
  PyObject_HEAD
  Accel *owner;
  vectorcallfunc call;
  vectorcallfunc vectorcall;
} Method;

static PyObject *Method_call(Method *m, PyObject *const *args, size_t nargsf, PyObject *kw) {
  if (m->owner == NULL || R(m->owner, TABLE) == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "offload accelerator: its table is gone");
    return NULL;
  }
  return m->call((PyObject *)m->owner, args, nargsf, kw);
}

static int Method_traverse(Method *m, visitproc visit, void *arg) {
  Py_VISIT(m->owner);
  return 0;
}

static int Method_clear(Method *m) {
  Py_CLEAR(m->owner);
  return 0;
}

static void Method_dealloc(Method *m) {
  PyObject_GC_UnTrack(m);
  Method_clear(m);
  PyObject_GC_Del(m);
}

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "offload._accel_c.Method",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)Method_dealloc,
    .tp_traverse = (traverseproc)Method_traverse,
    .tp_clear = (inquiry)Method_clear,
    .tp_doc = "MappingTable.begin_plain or end_plain, in C for the plain cases.",
};

static PyObject *bound(Accel *a, vectorcallfunc fn) {
  Method *m = PyObject_GC_New(Method, &MethodType);
  if (!m)
    return NULL;
  Py_INCREF(a);
  m->owner = a;
  m->call = fn;
  m->vectorcall = (vectorcallfunc)Method_call;
  PyObject_GC_Track(m);
  return (PyObject *)m;
}

/* accelerate(table, dev, plugin, entry_type, kind, new_lock, begin_py, end_py, release_py,
 *            update_py, limit, stage, copier) -> (begin_plain, end_plain, update_plain, present, release, update_arrays)
 * -> (begin_plain, end_plain). The table's lock, dict and lists, the device's lock,
 * allocation records, pool and statistics are taken now: they must be changed in place
 * for the table's lifetime. */
static PyObject *accelerate(PyObject *mod, PyObject *args) {
  PyObject *table, *dev, *plugin, *entry_type, *kind, *new_lock, *begin_py, *end_py,
      *release_py, *update_py, *stage, *copier;
  Py_ssize_t limit;
  (void)mod;
  if (!PyArg_ParseTuple(args, "OOOO!OOOOOOnOO", &table, &dev, &plugin, &PyType_Type,
                        &entry_type, &kind, &new_lock, &begin_py, &end_py, &release_py,
                        &update_py, &limit, &stage, &copier))
    return NULL;
  Accel *a = PyObject_GC_New(Accel, &AccelType);
  if (!a)
    return NULL;
  for (int i = 0; i < NREFS; i++)
    a->ref[i] = NULL;
  a->limit = limit;
  a->tlock = a->dlock = NULL;
  memset(&a->copier, 0, sizeof a->copier);
  a->stage = stage == Py_None ? -1 : PyLong_AsSsize_t(stage);
  PyObject_GC_Track(a);
  if (a->stage == -1 && PyErr_Occurred())
    goto bad;
  for (int i = 0; i < NSLOTS; i++) {
    PyObject *d = PyObject_GetAttrString(entry_type, slot_names[i]);
    if (!d)
      goto bad;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok)
      a->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
      PyErr_Format(PyExc_TypeError, "HostDataToTarget.%s is not a slot", slot_names[i]);
      goto bad;
    }
  }
  PyObject *given[NREFS] = {NULL};
  given[TABLE] = table; given[DEV] = dev; given[PLUGIN] = plugin;
  given[ENTRY_TYPE] = entry_type; given[KIND] = kind; given[NEW_LOCK] = new_lock;
  given[BEGIN_PY] = begin_py; given[END_PY] = end_py; given[RELEASE_PY] = release_py;
  given[UPDATE_PY] = update_py;
  for (int i = 0; i < NREFS; i++) {
    if (given[i]) {
      Py_INCREF(given[i]);
      a->ref[i] = given[i];
    }
  }
  PyObject *lock = NULL, *dev_lock = NULL, *pool = NULL;
  int ok = (a->ref[WHERE] = PyUnicode_FromString("unknown:0:0")) &&
           (lock = PyObject_GetAttrString(table, "_lock")) &&
           (a->ref[ACQUIRE] = PyObject_GetAttrString(lock, "acquire")) &&
           (a->ref[RELEASE] = PyObject_GetAttrString(lock, "release")) &&
           (a->ref[BY_START] = PyObject_GetAttrString(table, "_by_start")) &&
           (a->ref[STARTS] = PyObject_GetAttrString(table, "_starts")) &&
           (a->ref[ENTRIES] = PyObject_GetAttrString(table, "_entries")) &&
           (dev_lock = PyObject_GetAttrString(dev, "_lock")) &&
           (a->ref[DEV_ACQUIRE] = PyObject_GetAttrString(dev_lock, "acquire")) &&
           (a->ref[DEV_RELEASE] = PyObject_GetAttrString(dev_lock, "release")) &&
           (a->ref[ALLOCS] = PyObject_GetAttrString(dev, "_allocs")) &&
           (pool = PyObject_GetAttrString(dev, "pool")) &&
           (a->ref[POOL_FREE] = PyObject_GetAttrString(pool, "_free")) &&
           (a->ref[STATS] = PyObject_GetAttrString(dev, "stats")) &&
           (a->ref[IDLE] = PyObject_GetAttrString(table, "_idle"));
  if (pool) {
    a->ref[POOL] = pool;
    pool = NULL;
  }
  a->tlock = ok && Py_IS_TYPE(lock, &LockType) ? (Lock *)lock : NULL;   /* kept alive by */
  a->dlock = ok && Py_IS_TYPE(dev_lock, &LockType) ? (Lock *)dev_lock : NULL;  /* ACQUIRE */
  Py_XDECREF(lock);
  Py_XDECREF(dev_lock);
  if (!ok)
    goto bad;
  if (!PyDict_CheckExact(R(a, BY_START)) || !PyList_CheckExact(R(a, STARTS)) ||
      !PyList_CheckExact(R(a, ENTRIES)) || !PyDict_CheckExact(R(a, ALLOCS)) ||
      !PyDict_CheckExact(R(a, POOL_FREE)) || !PyDict_CheckExact(R(a, STATS))) {
    PyErr_SetString(PyExc_TypeError, "offload accelerator: unexpected table or device");
    goto bad;
  }
  /* ("memcpy",) or ("cuda", set_ctx, ctx, h2d, d2h, query, spin, streams, stream_objects,
   *  poll, check, drv, device, pin_split), or None */
  Copier *c = &a->copier;
  if (copier != Py_None) {
    const char *how;
    PyObject *addrs = NULL, *objs = NULL, *poll = NULL, *check = NULL, *drv = NULL;
    unsigned long long set_ctx = 0, ctx = 0, h2d = 0, d2h = 0, query = 0;
    if (!PyTuple_Check(copier) || PyTuple_GET_SIZE(copier) < 1 ||
        !(how = PyUnicode_AsUTF8(PyTuple_GET_ITEM(copier, 0))))
      goto bad_copier;
    if (!strcmp(how, "memcpy")) {
      c->kind = COPY_MEMCPY;
    } else if (!strcmp(how, "cuda")) {
      unsigned long long launch = 0;
      if (!PyArg_ParseTuple(copier, "sKKKKKdO!O!OOOlLK", &how, &set_ctx, &ctx, &h2d, &d2h,
                            &query, &c->spin, &PyTuple_Type, &addrs, &PyTuple_Type, &objs,
                            &poll, &check, &drv, &c->device, &c->split, &launch))
        goto bad;
      c->launch = launch;
      Py_ssize_t ns = PyTuple_GET_SIZE(addrs);
      if (ns < 1 || ns > MAX_STREAMS || PyTuple_GET_SIZE(objs) != ns)
        goto bad_copier;
      for (Py_ssize_t i = 0; i < ns; i++) {
        c->stream[i] = (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(addrs, i));
        if (PyErr_Occurred())
          goto bad;
      }
      c->nstreams = (int)ns;
      c->set_ctx = set_ctx; c->ctx = ctx; c->h2d = h2d; c->d2h = d2h; c->query = query;
      Py_INCREF(objs); a->ref[STREAMS] = objs;
      Py_INCREF(poll); a->ref[POLL] = poll;
      Py_INCREF(check); a->ref[CHECK] = check;
      Py_INCREF(drv); a->ref[DRV] = drv;
      c->kind = COPY_CUDA;
    } else {
      goto bad_copier;
    }
  }
  PyObject *b = bound(a, (vectorcallfunc)Accel_begin), *e = bound(a, (vectorcallfunc)Accel_end);
  PyObject *u = bound(a, (vectorcallfunc)Accel_update);
  PyObject *pr = bound(a, (vectorcallfunc)Accel_present);
  PyObject *rl = bound(a, (vectorcallfunc)Accel_release);
  PyObject *ua = bound(a, (vectorcallfunc)Accel_update_arrays);
  Py_DECREF(a);
  if (!b || !e || !u || !pr || !rl || !ua) {
    Py_XDECREF(b); Py_XDECREF(e); Py_XDECREF(u); Py_XDECREF(pr); Py_XDECREF(rl);
    Py_XDECREF(ua);
    return NULL;
  }
  return Py_BuildValue("(NNNNNN)", b, e, u, pr, rl, ua);
bad_copier:
  PyErr_SetString(PyExc_ValueError, "offload accelerator: a copier is None, ('memcpy',) or "
                  "('cuda', ...)");
bad:
  Py_DECREF(a);
  return NULL;
}

/* plain(clause): MapClause.plain in one call (the buffer protocol gives the address, size,
 * C-contiguity and writability at once). Set up by plain_setup(ndarray, not_plain). */
static PyObject *plain_py, *s_array, *s_type;
static long not_plain = -1;

static PyObject *plain_setup(PyObject *mod, PyObject *args) {
  PyObject *type, *py;
  long mask;
  (void)mod;
  if (!PyArg_ParseTuple(args, "O!lO", &PyType_Type, &type, &mask, &py))
    return NULL;
  Py_INCREF(type);
  Py_XSETREF(ndarray_type, type);
  Py_INCREF(py);
  Py_XSETREF(plain_py, py);
  not_plain = mask;
  Py_RETURN_NONE;
}

/* -1: no buffer (ask Python); 0: not plain; 1: plain, *p, *n, *ro set. */
static int plain_buffer(PyObject *arr, long t, uintptr_t *pp, Py_ssize_t *np_, int *rop) {
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

/* plain_array(a, t): (address, size) of a numpy array an update of type t (TO or FROM)
 * copies as one plain item, or None (not an exact ndarray, not C-contiguous, empty,
 * objects inside, read-only for FROM). */
static PyObject *plain_array(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "plain_array(a, t) after plain_setup");
    return NULL;
  }
  long t = PyLong_AsLong(args[1]);
  if (t == -1 && PyErr_Occurred())
    return NULL;
  uintptr_t p;
  Py_ssize_t n;
  int ro;
  if (Py_TYPE(args[0]) != (PyTypeObject *)ndarray_type ||
      plain_buffer(args[0], t, &p, &n, &ro) != 1)
    Py_RETURN_NONE;
  return Py_BuildValue("(Kn)", (unsigned long long)p, n);
}

static PyObject *plain(PyObject *mod, PyObject *clause) {
  (void)mod;
  if (!ndarray_type) {
    PyErr_SetString(PyExc_RuntimeError, "offload accelerator: plain_setup not called");
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
  if (t & not_plain)
    goto out;
  uintptr_t p;
  Py_ssize_t n;
  int ro, got = plain_buffer(arr, t, &p, &n, &ro);
  if (got < 0) {
    Py_DECREF(arr);
    Py_DECREF(to);
    return PyObject_CallOneArg(plain_py, clause);
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

/* Operation(fn, tls, process, current, unavailable, sigint, deliver): runtime.operation's
 * wrapper in C. Counts a public call as an operation in flight (the runtime's _inflight
 * list), refuses new ones while the runtime shuts down, delivers a Ctrl-C that arrived
 * meanwhile after the call; nested calls run straight. A method when set on a class. */
typedef struct {
  PyObject_HEAD
  PyObject *fn, *tls, *process, *current, *unavailable, *sigint, *deliver, *dict;
  vectorcallfunc vectorcall;
} Operation;

static PyObject *s_append, *s_pop, *s_rt, *s_live, *s_closing, *s_inflight, *s_pending_attr, *s_shutting;

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

static PyMethodDef methods[] = {
    {"plain_setup", plain_setup, METH_VARARGS,
     "plain_setup(ndarray, not_plain, python_plain): the array type, the map-type bits plain "
     "refuses, MapClause.plain for arrays without a C-contiguous buffer."},
    {"plain_array", (PyCFunction)(void (*)(void))plain_array, METH_FASTCALL,
     "plain_array(a, t) -> (address, size) when an update of type t copies a as one plain "
     "item, else None."},
    {"plain", plain, METH_O,
     "plain(clause) -> MapClause.plain(clause): (address, size, type, array, read-only) or "
     "None."},
    {"accelerate", accelerate, METH_VARARGS,
     "accelerate(table, dev, plugin, entry_type, kind, new_lock, begin_py, end_py, "
     "release_py, update_py, limit, stage, copier) -> (begin_plain, end_plain, update_plain, present, release, update_arrays) "
     "for one MappingTable."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_accel_c", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

#define INTERN(v, s) if (!(v = PyUnicode_InternFromString(s))) return NULL
PyMODINIT_FUNC PyInit__accel_c(void) {
  INTERN(s_acquire, "acquire"); INTERN(s_release, "release"); INTERN(s_info, "info"); INTERN(s_waiting, "_waiting"); INTERN(s_bytes, "bytes");
  INTERN(s_limit, "limit"); INTERN(s_alloc_starts, "_alloc_starts");
  INTERN(s_wait_before_reuse, "_wait_before_reuse"); INTERN(s_pinned, "pinned");
  INTERN(s_starts, "_starts"); INTERN(s_to_unpinned, "to unpinned");
  INTERN(s_from_unpinned, "from unpinned"); INTERN(s_locked, "locked");
  INTERN(s_copy_back, "copy_back"); INTERN(s_array, "array"); INTERN(s_type, "type");
  INTERN(s_busy_attr, "busy"); INTERN(s_dead, "dead"); INTERN(s_lock_attr, "_lock");
  INTERN(s_entries_attr, "_entries"); INTERN(s_host, "host"); INTERN(s_size, "size");
  INTERN(s_pending, "pending"); INTERN(s_dev, "dev"); INTERN(s_notify_all, "notify_all");
  INTERN(s_to_pinned, "to pinned"); INTERN(s_from_pinned, "from pinned");
  INTERN(s_last_kernel, "last_kernel"); INTERN(s_h2d_name, "cuMemcpyHtoDAsync");
  INTERN(s_d2h_name, "cuMemcpyDtoHAsync");
  INTERN(s_append, "append"); INTERN(s_pop, "pop"); INTERN(s_rt, "rt"); INTERN(s_live, "live"); INTERN(s_closing, "closing");
  INTERN(s_inflight, "_inflight"); INTERN(s_pending_attr, "pending");
  INTERN(s_shutting, "is shutting down");
  if (PyType_Ready(&AccelType) < 0 || PyType_Ready(&MethodType) < 0 ||
      PyType_Ready(&OperationType) < 0 || PyType_Ready(&LockType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m && (PyModule_AddObjectRef(m, "Operation", (PyObject *)&OperationType) < 0 ||
            PyModule_AddObjectRef(m, "Lock", (PyObject *)&LockType) < 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
