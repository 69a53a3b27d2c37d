/* Part of the accelerator (offload/accel_c/accel.c includes it): one single-range clause's map and
 * unmap (begin_single_range, end_single_range). */

/* (Device lock held.) A block of n bytes (`no`: n as an int, the pool's key) taken from the
 * device's pool and recorded as allocated, as GenericDevice.alloc's first step: 1 with its
 * address (*addr a new reference); 0 with nothing changed when the pool has none; -1 on an
 * error (memory: the block may be recorded as allocated). */
static int pool_take(Accel *a, PyObject *no, Py_ssize_t n, uintptr_t *tgt, PyObject **addr) {
  PyObject *blocks = PyDict_GetItemWithError(R(a, POOL_FREE), no);
  Py_ssize_t nb = blocks && PyList_CheckExact(blocks) ? PyList_GET_SIZE(blocks) : 0;
  long long bytes;
  if (!nb || !as_addr(PyList_GET_ITEM(blocks, nb - 1), tgt) || !*tgt ||
      !attr_size(R(a, POOL), s_bytes, &bytes)) {
    PyErr_Clear();
    return 0;
  }
  PyObject *got = Py_NewRef(PyList_GET_ITEM(blocks, nb - 1));
  PyObject *rec = Py_BuildValue("(nO)", n, R(a, KIND));
  PyObject *left = PyLong_FromLongLong(bytes - n);
  int bad = !rec || !left || PyDict_SetItem(R(a, ALLOCS), got, rec) < 0 ||
            PyObject_SetAttr(R(a, POOL), s_bytes, left) < 0 ||
            PyList_SetSlice(blocks, nb - 1, nb, NULL) < 0 ||
            PyObject_SetAttr(R(a, DEV), s_alloc_starts, Py_None) < 0 ||
            add_count(a, s_pool_hits, 1) < 0;
  Py_XDECREF(rec);
  Py_XDECREF(left);
  if (bad) {
    Py_DECREF(got);
    return -1;
  }
  *addr = got;
  return 1;
}

/* (Table lock held.) A new entry for [p, p+n) (`po`: p as an int) whose device memory is
 * `addr`, as HostDataToTarget(p, n, addr, None, owner, owned) with one dynamic reference
 * (marked in use once when `mark`), its `ready` lock `ready` (None: made), put in the
 * table: the entry (a new reference), or NULL with an exception and nothing put in. */
static PyObject *insert_entry(Accel *a, PyObject *po, uintptr_t p, Py_ssize_t n,
                              PyObject *addr, PyObject *owner, PyObject *ready, int mark,
                              PyObject *owned) {
  PyObject *ent = EntryType.tp_alloc(&EntryType, 0);
  PyObject *end = PyLong_FromUnsignedLongLong((unsigned long long)(p + (uintptr_t)n));
  if (!ent || !end) {
    Py_XDECREF(ent);
    Py_XDECREF(end);
    return NULL;
  }
  entry_fill(ent, po, end, addr, Py_None, owner, owned);
  Py_DECREF(end);
  put(ent, READY, Py_NewRef(ready), NULL);
  if (entry_reference(ent, 0) < 0 || (mark && entry_mark(ent) < 0) ||
      core_insert(a->core, ent) < 0) {
    Py_DECREF(ent);
    return NULL;
  }
  return ent;
}

/* begin_single_range(p, n, t, owner, read_only=False, busy=None), as MappingTable.begin_single_range. */
static PyObject *Accel_begin(Accel *a, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  uintptr_t p;
  Py_ssize_t n;
  long t;
  if (kwnames || nargs < 4 || nargs > 6 || !range_args(a, args, &p, &n, &t))
    return fallback(a, BEGIN_PY, args, nargs, kwnames);
  PyObject *po = args[0], *no = args[1], *owner = args[3];
  PyObject *busy = nargs > 5 ? args[5] : Py_None;
  if (busy != Py_None && !PyList_CheckExact(busy))
    return fallback(a, BEGIN_PY, args, nargs, kwnames);
  if (!try_table_lock(a))
    return fallback(a, BEGIN_PY, args, nargs, kwnames);
  TableCore *core = a->core;
  PyObject *result = NULL;
  int dev_locked = 0;

  PyObject *e = core_get(core, p, NULL);
  if (e) {                                       /* present: a reference, no copy */
    uintptr_t end;
    if (!IS_ENTRY(e) || !as_addr(F(e, HST_END), &end) || p + (uintptr_t)n > end ||
        !made(F(e, READY)))
      goto slow;
    if (busy != Py_None && PyList_Append(busy, e) < 0)
      goto done;
    int counted = entry_reference(e, 0) == 0;
    if (!counted || (busy != Py_None && entry_mark(e) < 0)) {
      PyObject *et, *ev, *tb;            /* (a count that is not one) nothing stays changed */
      int last;
      PyErr_Fetch(&et, &ev, &tb);
      if (counted)
        entry_unreference(e, 0, 0, &last);
      if (busy != Py_None)
        PyList_SetSlice(busy, PyList_GET_SIZE(busy) - 1, PyList_GET_SIZE(busy), NULL);
      PyErr_Restore(et, ev, tb);
      goto done;
    }
    result = F(e, TGT_BEGIN);
    Py_INCREF(result);
    goto done;
  }
  /* a new entry: nothing may overlap [p, p+n) */
  int inside;
  if (core_find(core, p, (uintptr_t)n, &inside))
    goto slow;
  if (!memcpy_now(a, n, 1))
    goto slow;
  /* a block of n bytes from the device's pool (GenericDevice.alloc's first step) */
  if (!(dev_locked = try_device_lock(a)))
    goto slow;
  uintptr_t tgt;
  PyObject *addr;
  int took = pool_take(a, no, n, &tgt, &addr);
  give_device_lock(a);
  dev_locked = 0;
  if (took == 0)
    goto slow;
  if (took < 0)
    goto done;
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
  PyObject *ent = insert_entry(a, po, p, n, addr, owner, ready, busy != Py_None, Py_True);
  if (!ent || (busy != Py_None && PyList_Append(busy, ent) < 0)) {
    if (ent)
      core_remove(core, ent);
    Py_XDECREF(ent);
    Py_DECREF(addr);
    Py_DECREF(ready);
    goto done;
  }
  Py_DECREF(ent);
  if (big) {
    give_table_lock(a);                       /* others wait on `ready` meanwhile */
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
  give_locks(a, dev_locked);
  return fallback(a, BEGIN_PY, args, nargs, kwnames);
done:
  give_locks(a, dev_locked);
  return result;
}

/* (Device lock held.) Whether the device's pool takes back the block at `key`: 1 with its
 * size and its size's free list (NULL: none yet), 0 when its record is not this kind's or
 * the pool keeps no more (nothing changed: MappingTable._release frees it), -1 on error. */
static int pool_takes(Accel *a, PyObject *key, Py_ssize_t *size, PyObject **blocks) {
  long long limit, bytes, sz;
  PyObject *rec = PyDict_GetItemWithError(R(a, ALLOCS), key);
  if (!rec || !PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 2 ||
      PyTuple_GET_ITEM(rec, 1) != R(a, KIND) || !as_size(PyTuple_GET_ITEM(rec, 0), &sz) ||
      !attr_size(R(a, POOL), s_limit, &limit) || !attr_size(R(a, POOL), s_bytes, &bytes) ||
      sz <= 0 || sz > limit || bytes + sz > limit)
    return PyErr_Occurred() ? -1 : 0;
  *size = (Py_ssize_t)sz;
  *blocks = PyDict_GetItemWithError(R(a, POOL_FREE), PyTuple_GET_ITEM(rec, 0));
  if ((*blocks && !PyList_CheckExact(*blocks)) || PyErr_Occurred())
    return PyErr_Occurred() ? -1 : 0;
  return 1;
}

/* (Device lock held.) The block at `key`, of `size` bytes, back on the pool's free list
 * `blocks` (NULL: a new one), as GenericDevice.free's pool step: 0, or -1 on error. */
static int pool_give(Accel *a, PyObject *key, Py_ssize_t size, PyObject *blocks) {
  PyObject *sz = PyLong_FromSsize_t(size);
  long long bytes = 0;
  PyObject *nbytes = sz && attr_size(R(a, POOL), s_bytes, &bytes)
                         ? PyLong_FromLongLong(bytes + size) : NULL;
  int bad = !sz || !nbytes || PyDict_DelItem(R(a, ALLOCS), key) < 0 ||
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
  return bad ? -1 : 0;
}

/* A taken-out entry's block freed (no lock held): back on the device's pool in C when the
 * pool takes it, its owner dropped, else by MappingTable._release. 0, or -1 with an
 * exception. */
static int release_entry(Accel *a, PyObject *f) {
  int pooled = 0;
  Py_ssize_t size = 0;
  PyObject *blocks = NULL, *key = F(f, TGT_BEGIN);
  if (F(f, OWNED) == Py_True && F(f, PINNED) == Py_False && try_device_lock(a)) {
    pooled = pool_takes(a, key, &size, &blocks) == 1 && pool_give(a, key, size, blocks) == 0;
    PyErr_Clear();                                 /* not taken: Python frees it */
    give_device_lock(a);
  }
  if (pooled) {
    PyObject *owner;
    put(f, OWNER, Py_NewRef(Py_None), &owner);
    Py_XDECREF(owner);
    return 0;
  }
  PyObject *call[2] = {R(a, TABLE), f};         /* MappingTable._release: free, unpin */
  PyObject *r = PyObject_Vectorcall(R(a, RELEASE_PY), call, 2, NULL);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

/* Tests: called as hook(host, tgt, size) before each copy back made outside the locks,
 * the entry held; what it raises fails the copy (copy_back_hook(hook or None)). */
static PyObject *copy_back_hook;

static PyObject *set_copy_back_hook(PyObject *self, PyObject *hook) {
  (void)self;
  Py_XSETREF(copy_back_hook, hook == Py_None ? NULL : Py_NewRef(hook));
  Py_RETURN_NONE;
}

/* The end of a last copy back made outside the locks, `copied` or failed with the
 * exception set (MappingTable._leave's rule, for an entry this call alone held: no other
 * thread counted it meanwhile): counted, the entry taken out unless mapped again (then
 * marked failed for those that waited), its block back on the pool (else
 * MappingTable._release frees it), then its `ready` let go. Takes the caller's reference
 * to `f`. */
static PyObject *leave_held(Accel *a, PyObject *f, Py_ssize_t n, int copied) {
  PyObject *et, *ev, *tb, *held = Py_NewRef(F(f, READY));
  PyErr_Fetch(&et, &ev, &tb);                   /* what the failed copy raised */
  if (copied && add_stat(a, s_from_unpinned, n) < 0)
    PyErr_Fetch(&et, &ev, &tb);
  wait_table_lock(a);
  long long dyn = 1, hold = 1;
  int gone = as_size(F(f, DYN), &dyn) && as_size(F(f, HOLD), &hold) && dyn + hold == 0;
  PyErr_Clear();
  PyObject *was;
  put(f, READY, Py_NewRef(Py_None), &was);
  Py_XDECREF(was);
  if (gone) {
    core_remove(a->core, f);
    put(f, FAILED, Py_NewRef(Py_True), &was);
    Py_XDECREF(was);
  }
  give_table_lock(a);
  if (gone && release_entry(a, f) < 0) {
    if (!et)
      PyErr_Fetch(&et, &ev, &tb);
    else
      PyErr_WriteUnraisable(R(a, RELEASE_PY));
  }
  unlock_lock(held);
  Py_DECREF(held);
  Py_DECREF(f);
  if (et) {
    PyErr_Restore(et, ev, tb);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* end_single_range(p, n, t, owner, e=None, copy_back=True), as MappingTable.end_single_range. */
static PyObject *Accel_end(Accel *a, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject *mine = Py_None, *copy_back = Py_True;
  uintptr_t p;
  Py_ssize_t n;
  long t;
  if (nargs < 4 || nargs > 6 || !range_args(a, args, &p, &n, &t))
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
  if (!try_table_lock(a))
    return fallback(a, END_PY, args, nargs, kwnames);
  TableCore *core = a->core;
  PyObject *result = NULL, *gone_owner = NULL, *keep = NULL;
  int dev_locked = 0;

  Py_ssize_t at = -1;
  PyObject *f = core_get(core, p, &at);
  uintptr_t end;
  long long dyn, busy, hold = 0;
  if (!f || !IS_ENTRY(f) || (own && f != mine) || !as_addr(F(f, HST_END), &end) ||
      p + (uintptr_t)n > end || !as_size(F(f, DYN), &dyn) ||
      !as_size(F(f, BUSY), &busy) || dyn < 1 || busy != own || !made(F(f, READY)))
    goto slow;
  if (own && a->core->waiting)
    goto slow;                              /* someone waits for it: Python notifies */
  int last = as_size(F(f, HOLD), &hold) && dyn - 1 + hold == 0;
  Py_ssize_t size = 0;
  uintptr_t tgt = 0;
  PyObject *blocks = NULL, *key = NULL;
  if (last) {                       /* the copy back and the free must take memcpy_now */
    if (F(f, SHADOWS) != Py_None || F(f, VIEWS) != Py_None ||  /* exported */
        F(f, PINNED) != Py_False ||
        F(f, OWNED) != Py_True || !as_addr(key = F(f, TGT_BEGIN), &tgt) || !tgt ||
        !memcpy_now(a, n, !(back && (t & 2))) ||
        !attr_false(R(a, DEV), s_wait_before_reuse))
      goto slow;
  }
  int big = last && n > a->limit;        /* released outside the locks */
  PyObject *held = NULL;                 /* a copy back outside them: the entry held */
  if (big && back && (t & 2)) {
    held = PyObject_CallNoArgs(R(a, NEW_LOCK));
    PyObject *got = held ? PyObject_CallMethodNoArgs(held, s_acquire) : NULL;
    if (!got) {
      Py_XDECREF(held);
      goto done;
    }
    Py_DECREF(got);
  }
  if (last && !big && ((dev_locked = try_device_lock(a)) == 0 ||
                       pool_takes(a, key, &size, &blocks) != 1))
    goto slow;                          /* the pool keeps no more: Python frees it */
  /* every check passed: the changes (the counts checked above: the unmark cannot fail
   * once the unreference did, and `last` is what the unreference finds) */
  if (entry_unreference(f, 0, 0, &last) < 0 || (own && entry_unmark(f) < 0)) {
    Py_XDECREF(held);
    goto done;
  }
  if (held) {                      /* who finds it waits on `ready` until it is left */
    PyObject *was;
    put(f, READY, held, &was);
    Py_XDECREF(was);
    Py_INCREF(f);
    give_table_lock(a);
    PyObject *r = copy_back_hook ? PyObject_CallFunction(copy_back_hook, "KKn",
        (unsigned long long)p, (unsigned long long)tgt, n) : Py_NewRef(Py_None);
    if (r) {
      Py_DECREF(r);
      Py_BEGIN_ALLOW_THREADS
      memcpy((void *)p, (const void *)tgt, (size_t)n);
      Py_END_ALLOW_THREADS
    }
    return leave_held(a, f, n, r != NULL);
  }
  if (big) {
    core_take(core, at);                          /* its reference is ours now */
    give_table_lock(a);                           /* nothing to copy back: free it */
    int r = release_entry(a, f);
    Py_DECREF(f);
    return r < 0 ? NULL : Py_NewRef(Py_None);
  }
  if (last) {
    keep = core_take(core, at);                  /* ours until the end */
    Py_INCREF(key);
    int bad = 0;
    if (back && (t & 2)) {               /* FROM */
      memcpy((void *)p, (const void *)tgt, (size_t)n);
      bad = add_stat(a, s_from_unpinned, n) < 0;
    }
    bad = bad || pool_give(a, key, size, blocks) < 0;
    Py_DECREF(key);
    Py_INCREF(Py_None);
    put(f, OWNER, Py_None, &gone_owner);     /* dropped after the locks */
    if (bad)
      goto done;
  }
  Py_INCREF(Py_None);
  result = Py_None;
  goto done;

slow:
  PyErr_Clear();
  give_locks(a, dev_locked);
  return fallback(a, END_PY, args, nargs, kwnames);
done:
  give_locks(a, dev_locked);
  Py_XDECREF(gone_owner);
  Py_XDECREF(keep);
  return result;
}
