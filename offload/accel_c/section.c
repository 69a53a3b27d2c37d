/* Part of the accelerator (offload/accel_c/accel.c includes it): a C-ABI kernel region whose
 * map list has one plain section mapped nowhere (a reduction's scalar: BabelStream's Dot)
 * run in one pass on a copier stream (launch_present_map). The section's entry is made as
 * begin_single_range makes one, with its `ready` lock held, in the stream's own area after
 * its launch environment (a kernel that reduces: one send sets the counters and the
 * section) or else a pooled block; its bytes go through the stream's pinned bounce buffer,
 * to the device before the launch and back after it, with one spin for all; then, as
 * end_single_range, the entry is taken out, its bytes copied back and a pooled block
 * returned to the pool (the spin drained the stream). */

/* A section made for one region (make_section), ended by finish_section. */
typedef struct {
  Py_ssize_t limit;               /* bytes a section may have here (0: none is made) */
  PyObject *entry;                /* the new entry (a reference); NULL: none made */
  uintptr_t host, tgt;
  Py_ssize_t n;
  long t;                         /* its TO (1) and FROM (2) bits */
  unsigned char *back;            /* FROM: where its bytes come back (n of them) */
  int stream;                     /* a copier stream taken for it first (-1: none) */
  uintptr_t env, buffer;          /* that stream's launch environment and its buffer: the
                                     section goes in the area after the environment's 16
                                     bytes (env 0: a pooled block instead) */
} Made;

enum { SECTION_RAN, SECTION_UNUSED, SECTION_FAILED };

/* The copier's bounce buffers' bytes, asked for the first time when `ask` (BOUNCE_PY() ->
 * (one address per stream, bytes each); ((), 0): none). 0 when there are none (not asked
 * for yet, nothing to ask, or asking failed: the Python path maps sections), -1 with an
 * exception that is not an Exception (Ctrl-C: asked again next time). */
static Py_ssize_t bounce_bytes(Accel *a, int ask) {
  Copier *c = &a->copier;
  if (c->bounce_bytes || !ask)
    return c->bounce_bytes > 0 ? c->bounce_bytes : 0;
  c->bounce_bytes = -1;
  if (c->kind != COPY_CUDA || !R(a, BOUNCE_PY))
    return 0;
  PyObject *got = PyObject_CallNoArgs(R(a, BOUNCE_PY)), *addrs;
  Py_ssize_t bytes = 0;
  if (got && PyArg_ParseTuple(got, "O!n", &PyTuple_Type, &addrs, &bytes) &&
      PyTuple_GET_SIZE(addrs) >= c->nstreams && bytes > 0) {
    for (int i = 0; i < c->nstreams && bytes; i++) {
      c->bounce[i] = (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(addrs, i));
      if (PyErr_Occurred() || !c->bounce[i])
        bytes = 0;
    }
    if (bytes)
      c->bounce_bytes = bytes;
  }
  Py_XDECREF(got);
  if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) {
    c->bounce_bytes = 0;
    return -1;
  }
  PyErr_Clear();
  return c->bounce_bytes > 0 ? c->bounce_bytes : 0;
}

/* What a region may map here at most (Made.limit): the bounce's bytes (`ask`: asked for
 * now if never yet) when nothing is pinned on the plugin (a mapping would take a pin
 * reference: the Python path), else 0; -1 with bounce_bytes's exception. */
static Py_ssize_t section_limit(Accel *a, int ask) {
  Py_ssize_t bytes = bounce_bytes(a, ask);
  return bytes <= 0 ? bytes : nothing_pinned(a) ? bytes : 0;
}

/* (Table lock held.) The entry of the list's section [p, p+n) (base `base`, map type t),
 * which shares no byte with any mapping: made when single_section's rule takes it (from
 * its base, no bits but TO, FROM and TARGET_PARAM) and it fits m->limit, in the taken
 * stream's area (m->env: the entry does not own it) or else a pooled block of n bytes
 * (none: not made), referenced and marked in use, its `ready` lock held: 1 with *dev its
 * device address; 0 with nothing changed (errors cleared). */
static int make_section(Accel *a, uintptr_t base, uintptr_t p, int64_t n, uint64_t t, Made *m,
                        uintptr_t *dev) {
  if (m->entry || base != p || n <= 0 || n > m->limit || (t & ~0x23ULL))
    return 0;
  PyObject *no = PyLong_FromLongLong(n), *addr = NULL;
  PyObject *po = PyLong_FromUnsignedLongLong((unsigned long long)p);
  PyObject *ready = PyObject_CallNoArgs(R(a, NEW_LOCK));
  PyObject *got = ready ? PyObject_CallMethodNoArgs(ready, s_acquire) : NULL;
  unsigned char *back = (t & 2) ? PyMem_Malloc((size_t)n) : NULL;
  uintptr_t tgt = m->env ? m->env + 16 : 0;
  int pooled = 0;
  if (no && po && got && (back || !(t & 2))) {
    if (m->env) {
      addr = PyLong_FromUnsignedLongLong((unsigned long long)tgt);
    } else if (try_device_lock(a)) {
      pooled = pool_take(a, no, (Py_ssize_t)n, &tgt, &addr) == 1;
      give_device_lock(a);
    }
  }
  Py_XDECREF(got);
  PyObject *e = addr ? insert_entry(a, po, p, (Py_ssize_t)n, addr, Py_None, ready, 1,
                                    pooled ? Py_True : Py_False)
                     : NULL;
  if (pooled && !e && try_device_lock(a)) {        /* the block back where it was */
    Py_ssize_t size;
    PyObject *blocks;
    if (pool_takes(a, addr, &size, &blocks) == 1)
      pool_give(a, addr, size, blocks);
    give_device_lock(a);
  }
  Py_XDECREF(no); Py_XDECREF(po); Py_XDECREF(addr); Py_XDECREF(ready);
  PyErr_Clear();
  if (!e) {
    PyMem_Free(back);
    return 0;
  }
  m->entry = e;
  m->host = p;
  m->tgt = *dev = tgt;
  m->n = (Py_ssize_t)n;
  m->t = (long)(t & 3);
  m->back = back;
  return 1;
}

/* The end of a made section's region, as end_single_range after Region.single_range's
 * launch: `how` SECTION_RAN (its bytes in m->back), SECTION_UNUSED (nothing was enqueued)
 * or SECTION_FAILED (no copy back). Its mark and reference given up; when that was the
 * last, the entry taken out (who waited on it finds it failed), its bytes copied back
 * (FROM, once it ran) and its block freed: back on the pool in C when nothing can still
 * use it, else by MappingTable._release (which waits for the device's queues). 0, or -1
 * with an exception (one set before the call is kept, and wins). */
static int finish_section(Accel *a, Made *m, int how) {
  PyObject *f = m->entry, *held = Py_NewRef(F(f, READY)), *was, *et, *ev, *tb;
  m->entry = NULL;
  PyErr_Fetch(&et, &ev, &tb);
  int last = 0, bad;
  wait_table_lock(a);
  bad = entry_unmark(f) < 0 || entry_unreference(f, 0, 0, &last) < 0;
  if (!bad && last && how == SECTION_RAN) {
    if (m->t & 1)
      bad = add_staged(a, 1, m->n) < 0;
    if (m->t & 2) {
      memcpy((void *)m->host, m->back, (size_t)m->n);
      bad = add_staged(a, 0, m->n) < 0 || bad;
    }
  }
  int owned = F(f, OWNED) == Py_True;
  if (!last && !owned) {         /* never: nothing finds it while its `ready` is held */
    last = 1;
    if (!bad)
      PyErr_SetString(PyExc_RuntimeError, "offload accelerator: a section's entry in a "
                      "stream's area was referenced while its region ran (taken out)");
    bad = 1;
  }
  put(f, READY, Py_NewRef(Py_None), &was);
  Py_XDECREF(was);
  if (last) {
    core_remove(a->core, f);
    put(f, FAILED, Py_NewRef(Py_True), &was);
    Py_XDECREF(was);
  }
  bad = core_wake(a->core) < 0 || bad;
  give_table_lock(a);
  if (!owned) {
    ;                                            /* the stream's area: nothing to free */
  } else if (last && how != SECTION_FAILED) {
    bad = release_entry(a, f) < 0 || bad;
  } else if (last) {
    PyObject *call[2] = {R(a, TABLE), f};
    PyObject *r = PyObject_Vectorcall(R(a, RELEASE_PY), call, 2, NULL);
    bad = !r || bad;
    Py_XDECREF(r);
  }
  unlock_lock(held);
  Py_DECREF(held);
  Py_DECREF(f);
  PyMem_Free(m->back);
  m->back = NULL;
  if (et) {
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
  }
  return et || bad ? -1 : 0;
}
