/* Part of the accelerator (offload/accel_c/accel.c includes it): updates and CUDA launches:
 * memcpy, or the driver's entry points on the copier's streams. */

/* An OpenMP kernel's reduction scratch, one launch environment and one buffer per copier
 * stream (a stream is one launch's at a time), and where the launch's first argument is. */
typedef struct {
  uintptr_t env[MAX_STREAMS], buffer[MAX_STREAMS];
  size_t bytes;
  size_t section;                 /* bytes of the area after each environment's 16, where a
                                     region's section goes (0: none) */
  uint64_t *first;
} Scratch;

static int on_stream_with(Accel *a, const CuWork *w, PyObject *what, const Scratch *scratch,
                          Made *m);
static int read_scratch(const Copier *c, PyObject *scratch, Scratch *sc);
static int free_stream(const Copier *c);

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
  return on_stream_with(a, w, what, NULL, NULL);
}

/* on_stream, and with `scratch` (a launch's per-stream scratch, see launch_now) the taken
 * stream's launch environment written into the kernel's first argument and its counters
 * set to 0 on the stream before the launch; with `m` (a section made for
 * the launch, section.c) its bytes sent through the stream's bounce buffer before the
 * launch (TO) and brought back into m->back after it (FROM). */
static int on_stream_with(Accel *a, const CuWork *w, PyObject *what, const Scratch *scratch,
                          Made *m) {
  Copier *c = &a->copier;
  int s = m && m->stream >= 0 ? m->stream : free_stream(c);
  if (m)
    m->stream = -1;                            /* handled here from now on */
  if (s < 0)
    return 0;
  c->taken[s] = 1;                             /* under the GIL: ours alone */
  void *stream = (void *)c->stream[s];
  CuEntries e = {(set_ctx_t)c->set_ctx, (void *)c->ctx, (cu_launch_t)c->launch,
                 (query_t)c->query, (cu_memset_t)c->memset};
  CuWork run = *w;
  if (scratch) {                               /* this stream's own: no other user now */
    *scratch->first = scratch->env[s];
    run.zero = scratch->env[s];
    run.zero_n = 8;                            /* ReductionCnt, ReductionIterCnt */
  }
  unsigned char *bounce = (unsigned char *)c->bounce[s];
  if (m && m->env) {         /* one send: the counters 0, the buffer's address, the bytes */
    uint64_t head[2] = {0, (uint64_t)m->buffer};
    memcpy(bounce, head, 16);
    if (m->t & 1)
      memcpy(bounce + 16, (const void *)m->host, (size_t)m->n);
    run.zero_n = 0;
    run.before = (CuSpan){(cu_copy_t)c->h2d, m->env, (uintptr_t)bounce,
                          16 + ((m->t & 1) ? (size_t)m->n : 0)};
    bounce += 16;
  } else if (m && (m->t & 1)) {
    memcpy(bounce, (const void *)m->host, (size_t)m->n);
    run.before = (CuSpan){(cu_copy_t)c->h2d, m->tgt, (uintptr_t)bounce, (size_t)m->n};
  }
  if (m && (m->t & 2))
    run.after = (CuSpan){(cu_copy_t)c->d2h, (uintptr_t)bounce, m->tgt, (size_t)m->n};
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = cuda_run_spin(&e, &run, stream, c->spin);
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
  if (rc == 0 && m && (m->t & 2))
    memcpy(m->back, bounce, (size_t)m->n);       /* before another launch may take it */
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
    if (!memcpy_now(a, n, to_device))
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
              to_device ? p : tgt, (size_t)n, NULL, 0, 0, 0, NULL, 0, 0, {0}, {0}};
  PyObject *what = to_device ? s_h2d_name : s_d2h_name;
  int done = on_stream(a, &w, what);
  if (done <= 0)
    return done;
  return add_stat(a, to_device ? s_to_pinned : s_from_pinned, n) < 0 ? -1 : 1;
}

/* Launch kernel `spec` = (function, grid, block, shared bytes, parameter sizes, name, what)
 * with the integer arguments `kargs` on one of the copier's streams and wait, as
 * CUDADevice._launch_impl's one-call path: 1 done, 0 not here (nothing done), -1 an
 * exception. With `scratch` (not None: a ReductionScratch (environments, buffers, bytes),
 * one of each per copier stream) the first argument is the taken stream's environment,
 * its counters set to 0 before the launch (an OpenMP kernel that reduces). With `m`, a
 * section made for the launch is copied around it (on_stream_with). */
static int launch_now(Accel *a, PyObject *spec, PyObject *kargs, PyObject *scratch, Made *m) {
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
  Scratch sc, *with = NULL;
  if (scratch && scratch != Py_None) {
    if (count < 1 || !read_scratch(c, scratch, &sc))
      return 0;                                /* the Python path launches */
    sc.first = &slot[0];
    with = &sc;
  }
  if (!cuda_alive(a))
    return 0;
  if (PyObject_SetAttr(R(a, DRV), s_last_kernel, name) < 0)
    return -1;
  CuWork w = {1, NULL, 0, 0, 0, (void *)fn, grid, block, shared, count ? param : NULL,
              0, 0, {0}, {0}};
  return on_stream_with(a, &w, what, with, m);
}

/* The first stream of the copier no launch or copy has taken, or -1. */
static int free_stream(const Copier *c) {
  for (int i = 0; i < c->nstreams; i++)
    if (!c->taken[i])
      return i;
  return -1;
}

/* For a region of a kernel that reduces (`scratch`, a ReductionScratch with an area after
 * each environment): a free stream taken now, so that a section made for the region takes
 * that stream's area (after m->env) and is sent with the counters in one copy; m->limit
 * cut to the area. Nothing (m->stream -1) when the scratch has no area or no stream is
 * free. */
static void take_area(Accel *a, PyObject *scratch, Made *m) {
  Copier *c = &a->copier;
  Scratch sc;
  int s = free_stream(c);
  if (m->limit <= 16 || !scratch || scratch == Py_None || s < 0 ||
      !read_scratch(c, scratch, &sc) || !sc.section)
    return;
  c->taken[s] = 1;
  m->stream = s;
  m->env = sc.env[s];
  m->buffer = sc.buffer[s];
  m->limit -= 16;                              /* the bounce holds the environment first */
  if ((size_t)m->limit > sc.section)
    m->limit = (Py_ssize_t)sc.section;
}

/* The stream take_area took, given back when no launch used it. */
static void give_area(Accel *a, Made *m) {
  if (m->stream >= 0)
    a->copier.taken[m->stream] = 0;
  m->stream = -1;
  m->env = 0;
}

/* A ReductionScratch (environments, buffers, bytes[, section]) with one of each for every
 * stream of the copier, read into *sc: 1, else 0 (error cleared). */
static int read_scratch(const Copier *c, PyObject *scratch, Scratch *sc) {
  PyObject *envs, *bufs;
  unsigned long long bytes, section = 0;
  if (!c->memset || !PyArg_ParseTuple(scratch, "O!O!K|K", &PyTuple_Type, &envs, &PyTuple_Type,
                                      &bufs, &bytes, &section) ||
      PyTuple_GET_SIZE(envs) < c->nstreams || PyTuple_GET_SIZE(bufs) < c->nstreams) {
    PyErr_Clear();
    return 0;
  }
  for (int i = 0; i < c->nstreams; i++) {
    sc->env[i] = (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(envs, i));
    sc->buffer[i] = (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(bufs, i));
    if (PyErr_Occurred() || !sc->env[i] || !sc->buffer[i]) {
      PyErr_Clear();
      return 0;
    }
  }
  sc->bytes = (size_t)bytes;
  sc->section = (size_t)section;
  return 1;
}

/* busy -= 1 on e under the table lock, waking waiters as release_busy does. */
static int release_one(Accel *a, PyObject *e) {
  if (wait_table_lock(a) < 0)                                        /* blocking, as Python */
    return -1;
  int rc = entry_unmark(e);
  if (core_wake(a->core) < 0)
    rc = -1;
  give_table_lock(a);
  return rc;
}

/* update_single_range(p, n, t): MappingTable.update_single_range (target_data_update of one item over
 * [p, p+n), t = TO or FROM): absent data skipped, present data copied now. */
static PyObject *Accel_update(Accel *a, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  uintptr_t p;
  Py_ssize_t n;
  long t;
  if (kwnames || nargs != 3 || a->copier.kind == COPY_NONE || !range_args(a, args, &p, &n, &t) ||
      (t != 1 && t != 2))
    return fallback(a, UPDATE_PY, args, nargs, kwnames);
  if (!try_table_lock(a))
    return fallback(a, UPDATE_PY, args, nargs, kwnames);
  Py_ssize_t i = core_after(a->core, p) - 1;             /* the entry starting at or before p */
  PyObject *e = i >= 0 ? a->core->entries[i] : NULL;
  uintptr_t begin, end, tgt0;
  if (!e || !IS_ENTRY(e) || !as_addr(F(e, HST_BEGIN), &begin) ||
      !as_addr(F(e, HST_END), &end) || p < begin || p + (uintptr_t)n > end ||
      !as_addr(F(e, TGT_BEGIN), &tgt0) || !tgt0 || F(e, SHADOWS) != Py_None ||
      !made(F(e, READY)) || entry_mark(e) < 0) {     /* in use: an unmap waits for the copy */
    PyErr_Clear();
    give_table_lock(a);
    return fallback(a, UPDATE_PY, args, nargs, kwnames);   /* absent data: Python too */
  }
  Py_INCREF(e);
  give_table_lock(a);
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

/* update_arrays(to, from_): target_update's common call, one whole numpy array in all
 * (exact ndarray, C-contiguous, plain dtype, writeable for FROM), made as update_single_range
 * makes it: True; None when the lists hold anything else (nothing done: Python path). */
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
  if (Py_TYPE(arr) != (PyTypeObject *)ndarray_type || whole_array_buffer(arr, t, &p, &n, &ro) != 1)
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
