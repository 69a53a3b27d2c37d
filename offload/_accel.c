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

/* Slots of HostDataToTarget, by their offsets in the object. */
enum { HST_BEGIN, HST_END, HST_BASE, TGT_BEGIN, DYN, HOLD, OWNER, NAME, PINNED, OWNED, READY,
       FAILED, WHERE_, BUSY, VIEWS, SHADOWS, NSLOTS };
static const char *slot_names[NSLOTS] = {
    "hst_begin", "hst_end", "hst_base", "tgt_begin", "dyn", "hold", "owner", "name", "pinned",
    "owned", "ready", "failed", "where", "busy", "views", "shadows"};

/* Objects the table and device keep for their lifetime (they change them in place). */
enum { TABLE, DEV, PLUGIN, ENTRY_TYPE, KIND, NEW_LOCK, WHERE, BEGIN_PY, END_PY, ACQUIRE,
       RELEASE, BY_START, STARTS, ENTRIES, DEV_ACQUIRE, DEV_RELEASE, ALLOCS, POOL, POOL_FREE,
       STATS, RELEASE_PY, NREFS };

typedef struct {
  PyObject_HEAD
  PyObject *ref[NREFS];
  Py_ssize_t off[NSLOTS];
  Py_ssize_t limit;       /* largest copy made under the table lock */
  Py_ssize_t stage;       /* the plugin's staging threshold (-1: none) */
} Accel;

#define R(a, i) ((a)->ref[i])
#define SLOT(a, o, i) (*(PyObject **)((char *)(o) + (a)->off[i]))
#define IS_ENTRY(a, o) (Py_TYPE(o) == (PyTypeObject *)R(a, ENTRY_TYPE))

static PyObject *s_acquire, *s_release;
static PyObject *s_info, *s_waiting, *s_bytes, *s_limit, *s_alloc_starts,
    *s_wait_before_reuse, *s_pinned, *s_starts, *s_to_unpinned, *s_from_unpinned, *s_locked,
    *s_copy_back;

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
  if (!try_lock(R(a, ACQUIRE)))
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
  if (!(dev_locked = try_lock(R(a, DEV_ACQUIRE))))
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
  unlock(R(a, DEV_RELEASE));
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
    unlock(R(a, RELEASE));                       /* others wait on `ready` meanwhile */
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
    unlock(R(a, DEV_RELEASE));
  unlock(R(a, RELEASE));
  Py_XDECREF(one);
  return fallback(a, BEGIN_PY, args, nargs, kwnames);
done:
  if (dev_locked)
    unlock(R(a, DEV_RELEASE));
  unlock(R(a, RELEASE));
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
  if (!try_lock(R(a, ACQUIRE)))
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
    if (!(dev_locked = try_lock(R(a, DEV_ACQUIRE))))
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
    unlock(R(a, RELEASE));
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
    unlock(R(a, DEV_RELEASE));
  unlock(R(a, RELEASE));
  return fallback(a, END_PY, args, nargs, kwnames);
done:
  if (dev_locked)
    unlock(R(a, DEV_RELEASE));
  unlock(R(a, RELEASE));
  Py_XDECREF(gone_owner);
  Py_XDECREF(keep);
  return result;
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
 *            limit, stage)
 * -> (begin_plain, end_plain). The table's lock, dict and lists, the device's lock,
 * allocation records, pool and statistics are taken now: they must be changed in place
 * for the table's lifetime. */
static PyObject *accelerate(PyObject *mod, PyObject *args) {
  PyObject *table, *dev, *plugin, *entry_type, *kind, *new_lock, *begin_py, *end_py,
      *release_py, *stage;
  Py_ssize_t limit;
  (void)mod;
  if (!PyArg_ParseTuple(args, "OOOO!OOOOOnO", &table, &dev, &plugin, &PyType_Type,
                        &entry_type, &kind, &new_lock, &begin_py, &end_py, &release_py,
                        &limit, &stage))
    return NULL;
  Accel *a = PyObject_GC_New(Accel, &AccelType);
  if (!a)
    return NULL;
  for (int i = 0; i < NREFS; i++)
    a->ref[i] = NULL;
  a->limit = limit;
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
           (a->ref[STATS] = PyObject_GetAttrString(dev, "stats"));
  if (pool) {
    a->ref[POOL] = pool;
    pool = NULL;
  }
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
  PyObject *b = bound(a, (vectorcallfunc)Accel_begin), *e = bound(a, (vectorcallfunc)Accel_end);
  Py_DECREF(a);
  if (!b || !e) {
    Py_XDECREF(b);
    Py_XDECREF(e);
    return NULL;
  }
  return Py_BuildValue("(NN)", b, e);
bad:
  Py_DECREF(a);
  return NULL;
}

/* plain(clause): MapClause.plain in one call (the buffer protocol gives the address, size,
 * C-contiguity and writability at once). Set up by plain_setup(ndarray, not_plain). */
static PyObject *ndarray_type, *plain_py, *s_array, *s_type;
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
  Py_buffer v;
  if (PyObject_GetBuffer(arr, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
    PyErr_Clear();                 /* not C-contiguous, or a dtype buffers do not carry */
    Py_DECREF(arr);
    Py_DECREF(to);
    return PyObject_CallOneArg(plain_py, clause);
  }
  int objects = v.format && strchr(v.format, 'O') != NULL;   /* (or a field name with O) */
  Py_ssize_t n = v.len;
  int ro = v.readonly;
  uintptr_t p = (uintptr_t)v.buf;
  PyBuffer_Release(&v);
  if (objects || n <= 0 || (ro && (t & 2)))
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

static PyMethodDef methods[] = {
    {"plain_setup", plain_setup, METH_VARARGS,
     "plain_setup(ndarray, not_plain, python_plain): the array type, the map-type bits plain "
     "refuses, MapClause.plain for arrays without a C-contiguous buffer."},
    {"plain", plain, METH_O,
     "plain(clause) -> MapClause.plain(clause): (address, size, type, array, read-only) or "
     "None."},
    {"accelerate", accelerate, METH_VARARGS,
     "accelerate(table, dev, plugin, entry_type, kind, new_lock, begin_py, end_py, "
     "release_py, limit, stage) -> "
     "(begin_plain, end_plain) for one MappingTable."},
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
  if (PyType_Ready(&AccelType) < 0 || PyType_Ready(&MethodType) < 0)
    return NULL;
  return PyModule_Create(&module);
}
