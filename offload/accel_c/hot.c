/* Part of the accelerator (offload/accel_c/accel.c includes it): a kept kernel region run
 * again straight from the drop-in library's C body, no Python code run on the way (the
 * compiled twin of capi/kernels.py's kept path, hot_regions.find and _run_kept).
 *
 * capi/hot_regions.py keeps each region here as well (hot_keep): its key (the device
 * number resolved, the region, num_teams, thread_limit, trip count), the step that runs it
 * (an Operation over launch_present_map or call_present_map) with the arguments it adds
 * after the map arrays, and what must still hold: the runtime that was live, the registry
 * version, the device's generic part (no kernel recording on it). The library calls
 * offload_hot_kernel (hot_address) with a region's launch; it answers KERNEL_GENERAL with
 * nothing done for anything but a kept region whose checks all hold and whose step ran
 * it, so the library then takes its Python path. A region whose step answers a section
 * to map first (one the step cannot make: the host's, or past the CUDA core's limit) is
 * let go, so its later launches go the Python way at once. Every slot is written under the GIL and
 * read under it, but for a first look at the region (a slot holding another region, or
 * none: no GIL taken for a launch never kept). */

#define HOT_SLOTS 1024                     /* a power of two; a key's slot holds one region */
#define HOT_FAIL (-1)                      /* LLVM's OFFLOAD_FAIL */

typedef struct {
  int64_t dev;
  uintptr_t region;
  int32_t teams, threads;
  uint64_t trip;
  PyObject *step, *extra, *rt, *gen;       /* extra: a tuple; NULL step: an empty slot */
  long long version;
} HotRegion;

static HotRegion hot_slots[HOT_SLOTS];
/* hot_setup's objects: runtime._process, the registry, the ompt and profile modules,
 * exports' injected failures (a set), failed(loc, export, exception) -> int, and the
 * library's answer for "nothing done" (capi/abi.py's KERNEL_GENERAL) */
static PyObject *hot_process, *hot_registry, *hot_ompt, *hot_profile, *hot_inject,
    *hot_failed;
static int hot_general = 1;
static PyObject *hot_data_failed, *hot_data_kinds;
static unsigned long long hot_runs, hot_data_runs;  /* what the entries ran (hot_ran) */

static HotRegion *hot_slot(int64_t dev, uintptr_t region, int32_t teams, int32_t threads,
                           uint64_t trip) {
  uint64_t h = (uint64_t)region * 0x9E3779B97F4A7C15ull;
  h ^= ((uint64_t)dev << 48) ^ ((uint64_t)(uint32_t)teams << 24) ^ (uint32_t)threads ^
       (trip * 0xC2B2AE3D27D4EB4Full);
  return &hot_slots[(h ^ (h >> 29)) & (HOT_SLOTS - 1)];
}

static void hot_clear_slot(HotRegion *s) {
  PyObject *step = s->step, *extra = s->extra, *rt = s->rt, *gen = s->gen;
  s->step = s->extra = s->rt = s->gen = NULL;
  Py_XDECREF(step);
  Py_XDECREF(extra);
  Py_XDECREF(rt);
  Py_XDECREF(gen);
}

/* 1 when `v` (a new reference, let go; NULL: an error, cleared) is `want`, else 0. */
static int hot_is(PyObject *v, PyObject *want) {
  if (!v) {
    PyErr_Clear();
    return 0;
  }
  Py_DECREF(v);
  return v == want;
}

/* The checks every kept construct makes: no injected failure, runtime `rt` live and not
 * closing, no OMPT tool, no program (un)registered since registry version `version`. */
static int hot_still(PyObject *rt, long long version) {
  if (PySet_GET_SIZE(hot_inject) || !hot_is(PyObject_GetAttr(hot_process, s_live), rt) ||
      !hot_is(PyObject_GetAttr(rt, s_closing), Py_False) ||
      !hot_is(PyObject_GetAttr(hot_ompt, s_listening), Py_False))
    return 0;
  PyObject *v = PyObject_GetAttr(hot_registry, s_version);
  long long now = v ? PyLong_AsLongLong(v) : -1;
  Py_XDECREF(v);
  PyErr_Clear();
  return now == version;
}

/* hot_regions.find's checks on slot `s`: hot_still's, no profile, no recording on the
 * device. */
static int hot_holds(HotRegion *s) {
  return hot_still(s->rt, s->version) &&
         hot_is(PyObject_GetAttr(hot_profile, s_active), Py_None) &&
         hot_is(PyObject_GetAttr(s->gen, s_arena), Py_None);
}

/* The raised exception handed to `failed(loc, export, exception)` (the export's own
 * report): what it returns as an int, or HOT_FAIL (its own failure reported unraisable). */
static int hot_report(PyObject *failed, void *loc, int32_t export) {
  PyObject *typ, *val, *tb;
  PyErr_Fetch(&typ, &val, &tb);
  PyErr_NormalizeException(&typ, &val, &tb);
  if (tb)
    PyException_SetTraceback(val, tb);
  PyObject *out = PyObject_CallFunction(failed, "KiO", (unsigned long long)(uintptr_t)loc,
                                        export, val);
  int r = out && PyLong_Check(out) ? (int)PyLong_AsLong(out) : HOT_FAIL;
  Py_XDECREF(out);
  Py_XDECREF(typ);
  Py_XDECREF(val);
  Py_XDECREF(tb);
  if (PyErr_Occurred()) {
    PyErr_WriteUnraisable(failed);
    r = HOT_FAIL;
  }
  return r;
}

/* The kept region of this launch run (GIL held): 0 once it ran, KERNEL_GENERAL with nothing
 * done, or what `failed` makes of the step's exception. */
static int hot_run(void *loc, int32_t export, int64_t dev, int32_t teams, int32_t threads,
                   uintptr_t region, uint64_t trip, int32_t n, const uintptr_t arrays[5]) {
  HotRegion *s = hot_slot(dev, region, teams, threads, trip);
  if (!s->step || s->dev != dev || s->region != region || s->teams != teams ||
      s->threads != threads || s->trip != trip || !hot_holds(s))
    return hot_general;
  PyObject *step = Py_NewRef(s->step), *extra = Py_NewRef(s->extra);   /* kept meanwhile */
  Py_ssize_t ne = PyTuple_GET_SIZE(extra);
  PyObject *argv[6 + 4] = {NULL};
  int r = hot_general, made = ne <= 4 && (argv[0] = PyLong_FromLong(n)) != NULL;
  for (int i = 0; made && i < 5; i++)
    made = (argv[i + 1] = PyLong_FromUnsignedLongLong(arrays[i])) != NULL;
  if (made) {
    for (Py_ssize_t i = 0; i < ne; i++)
      argv[6 + i] = PyTuple_GET_ITEM(extra, i);
    PyObject *got = PyObject_Vectorcall(step, argv, (size_t)(6 + ne), NULL);
    if (got) {
      r = got == Py_True ? 0 : hot_general;     /* False, None, a section: nothing done */
      hot_runs += got == Py_True;
      if (PyTuple_Check(got) && s->step == step)  /* a section it cannot make: not again */
        hot_clear_slot(s);
      Py_DECREF(got);
    }
  }
  for (int i = 0; i < 6; i++)
    Py_XDECREF(argv[i]);
  Py_DECREF(step);
  Py_DECREF(extra);
  if (PyErr_Occurred())                         /* as kernel_many's export reports it */
    r = hot_report(hot_failed, loc, export);
  return r;
}

/* The library's entry (its address is hot_address()): kernel_many's arguments, the device
 * number resolved. A thread Python has never seen goes the Python way (cffi's entry makes
 * its thread state, kept for later calls). */
static int offload_hot_kernel(void *loc, int32_t export, int64_t dev, int32_t teams,
                              int32_t threads, uintptr_t region, uint64_t trip, int32_t n,
                              uintptr_t bases, uintptr_t begins, uintptr_t sizes,
                              uintptr_t types, uintptr_t mappers) {
  const volatile HotRegion *s = hot_slot(dev, region, teams, threads, trip);
  if (!hot_failed || s->region != region || !PyGILState_GetThisThreadState())
    return hot_general;                     /* (a region being kept: looked at again) */
  PyGILState_STATE g = PyGILState_Ensure();
  const uintptr_t arrays[5] = {bases, begins, sizes, types, mappers};
  int r = hot_run(loc, export, dev, teams, threads, region, trip, n, arrays);
  PyGILState_Release(g);
  return r;
}

/* Kept data constructs (the compiled twin of capi/data.py's data_one): per device number,
 * the steps its one plain section takes (Operations over begin_single_range,
 * end_single_range and update_single_range), a step bound to its table (the table's
 * `observed`), and what must still hold. */
#define HOT_DEVICES 64

typedef struct {
  PyObject *begin, *end, *update, *table, *rt;     /* NULL begin: none kept */
  long long version;
} HotData;

static HotData hot_data[HOT_DEVICES];

static void hot_clear_data(HotData *h) {
  PyObject *o[5] = {h->begin, h->end, h->update, h->table, h->rt};
  h->begin = h->end = h->update = h->table = h->rt = NULL;
  for (int i = 0; i < 5; i++)
    Py_XDECREF(o[i]);
}

/* hot_still's checks for a kept device (no kernel: no profile or recording to ask), and
 * its table not observed (maps.single_section's rule). */
static int hot_data_holds(HotData *h) {
  Method *m = (Method *)h->table;
  return Py_TYPE(h->table) == &MethodType && m->owner && m->owner->core &&
         !m->owner->core->observed && hot_still(h->rt, h->version);
}

/* The library's entry for a data construct of one component without a mapper (its address
 * is hot_data_address()), the device number resolved: 1 once done (or failed and
 * reported, as data_one), 0 with nothing done (the library then calls data_one). */
static int offload_hot_data(void *loc, int32_t export, int64_t dev, uintptr_t base,
                            uintptr_t begin, int64_t size, uint64_t type) {
  if (dev < 0 || dev >= HOT_DEVICES || !plain_section(base, begin, size, type) ||
      !hot_data_failed)
    return 0;
  const volatile HotData *seen = &hot_data[dev];
  if (!seen->begin || !PyGILState_GetThisThreadState())
    return 0;
  PyGILState_STATE g = PyGILState_Ensure();
  HotData *h = &hot_data[dev];
  long t = (long)(type & 0x3);
  char kind = export >= 0 && export < PyBytes_GET_SIZE(hot_data_kinds)
                  ? PyBytes_AS_STRING(hot_data_kinds)[export] : 0;
  PyObject *step = kind == 'b' ? h->begin : kind == 'e' ? h->end : kind == 'u' ? h->update
                                                                              : NULL;
  int r = 0;
  if (step && h->begin && (kind != 'u' || t == 1 || t == 2) && hot_data_holds(h)) {
    Py_INCREF(step);
    PyObject *argv[4] = {PyLong_FromUnsignedLongLong(begin), PyLong_FromLongLong(size),
                         PyLong_FromLong(t), Py_None};
    PyObject *got = argv[0] && argv[1] && argv[2]
                        ? PyObject_Vectorcall(step, argv, kind == 'u' ? 3 : 4, NULL) : NULL;
    for (int i = 0; i < 3; i++)
      Py_XDECREF(argv[i]);
    Py_DECREF(step);
    Py_XDECREF(got);
    r = 1;
    if (!got) {                                   /* as data_one reports it: done */
      hot_report(hot_data_failed, loc, export);
    } else {
      hot_data_runs++;
    }
  }
  PyGILState_Release(g);
  return r;
}

/* hot_keep_data(dev, begin, end, update, table, rt, version): device `dev`'s data
 * constructs kept (`table`: one of its table's compiled steps). */
static PyObject *hot_keep_data(PyObject *self, PyObject *args) {
  long long dev, version;
  PyObject *o[5];
  (void)self;
  if (!PyArg_ParseTuple(args, "LOOOOOL", &dev, &o[0], &o[1], &o[2], &o[3], &o[4], &version))
    return NULL;
  if (dev < 0 || dev >= HOT_DEVICES || Py_TYPE(o[3]) != &MethodType)
    Py_RETURN_FALSE;
  HotData *h = &hot_data[dev];
  hot_clear_data(h);
  *h = (HotData){Py_NewRef(o[0]), Py_NewRef(o[1]), Py_NewRef(o[2]), Py_NewRef(o[3]),
                 Py_NewRef(o[4]), version};
  Py_RETURN_TRUE;
}

/* hot_data_address() -> the address of offload_hot_data, for the library. */
static PyObject *hot_data_address(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)&offload_hot_data);
}

/* hot_setup(process, registry, ompt, profile, inject, failed, general, data_failed,
 * kinds): what the checks read and what the entries answer (hot_data_kinds: a bytes of
 * b, e or u per data export). */
static PyObject *hot_setup(PyObject *self, PyObject *args) {
  PyObject *o[8];
  int general;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOOOO!OiOS", &o[0], &o[1], &o[2], &o[3], &PySet_Type, &o[4],
                        &o[5], &general, &o[6], &o[7]))
    return NULL;
  hot_general = general;
  PyObject **at[8] = {&hot_process, &hot_registry, &hot_ompt, &hot_profile, &hot_inject,
                      &hot_failed, &hot_data_failed, &hot_data_kinds};
  for (int i = 0; i < 8; i++)
    Py_XSETREF(*at[i], Py_NewRef(o[i]));
  Py_RETURN_NONE;
}

/* hot_keep(dev, region, teams, threads, trip, step, extra, rt, gen, version). */
static PyObject *hot_keep(PyObject *self, PyObject *args) {
  long long dev, version;
  unsigned long long region, trip;
  int teams, threads;
  PyObject *step, *extra, *rt, *gen;
  (void)self;
  if (!PyArg_ParseTuple(args, "LKiiKOO!OOL", &dev, &region, &teams, &threads, &trip, &step,
                        &PyTuple_Type, &extra, &rt, &gen, &version))
    return NULL;
  if (PyTuple_GET_SIZE(extra) > 4) {
    PyErr_SetString(PyExc_ValueError, "hot_keep: at most 4 arguments after the map arrays");
    return NULL;
  }
  HotRegion *s = hot_slot(dev, (uintptr_t)region, teams, threads, trip);
  hot_clear_slot(s);
  *s = (HotRegion){dev, (uintptr_t)region, teams, threads, trip, Py_NewRef(step),
                   Py_NewRef(extra), Py_NewRef(rt), Py_NewRef(gen), version};
  Py_RETURN_NONE;
}

/* hot_forget(): every slot emptied. */
static PyObject *hot_forget(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  for (int i = 0; i < HOT_SLOTS; i++)
    hot_clear_slot(&hot_slots[i]);
  for (int i = 0; i < HOT_DEVICES; i++)
    hot_clear_data(&hot_data[i]);
  Py_RETURN_NONE;
}

/* hot_ran() -> how many regions the entry has run; hot_data_ran(): data constructs. */
static PyObject *hot_ran(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromUnsignedLongLong(hot_runs);
}

static PyObject *hot_data_ran(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromUnsignedLongLong(hot_data_runs);
}

/* hot_address() -> the address of offload_hot_kernel, for the library. */
static PyObject *hot_address(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)&offload_hot_kernel);
}
