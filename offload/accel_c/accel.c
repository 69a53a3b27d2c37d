/* offload's compiled mapping core (offload/_accel.py builds and loads it): a table's state
 * as C types (entry.c: HostDataToTarget and its counts, table.c: TableCore; the twins of
 * offload/entries.py and offload/mapping/core.py) and the common single-array steps over them.
 *
 * The steps read the core's and the entries' structs directly; every other Python object
 * they reach (the device's allocation records and pool, the plugin's pinned ranges, the
 * CUDA driver's state, the runtime) they reach through the names interface.c declares.
 * Whenever a case is not the single-range one (an overlap, an entry being made or in use
 * by others, a waiter, pinned memory, a pool without a block of the size, a lock held by
 * another thread), a step calls the Python method instead, having changed nothing. Locks
 * are the table's and the device's own, taken without blocking. On host memory, copies up
 * to `limit` bytes are a memcpy under the table lock; larger ones run as the Python methods
 * run them, outside it and without the GIL: a new mapping is in the table with its `ready`
 * lock held until its first copy is done, and a mapping's last copy back runs with its
 * `ready` lock held the same way, the mapping taken out once it is done. On CUDA, an
 * update's pinned copy and a region's launch run through the driver's entry points on
 * streams of the device.
 *
 * The parts, included here in this order as one translation unit (their functions stay
 * static): interface.c, cuda_work.c, lock.c, entry.c, table.c, common.c, single_range.c,
 * section.c, update.c, present.c, direct_call.c, clauses.c, operation.c, dlpack.c; this file adds
 * the accelerator object of a table, its bound methods (then hot.c) and the module. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include <pythread.h>

#include "interface.c"
#include "cuda_work.c"
#include "lock.c"
#include "entry.c"
#include "table.c"
#include "common.c"
#include "single_range.c"
#include "section.c"
#include "update.c"
#include "present.c"
#include "direct_call.c"
#include "clauses.c"
#include "operation.c"
#include "dlpack.c"

static int Accel_traverse(Accel *a, visitproc visit, void *arg) {
  for (int i = 0; i < NREFS; i++)
    Py_VISIT(a->ref[i]);
  Py_VISIT(a->core);
  return 0;
}

static int Accel_clear(Accel *a) {
  for (int i = 0; i < NREFS; i++)
    Py_CLEAR(a->ref[i]);
  Py_CLEAR(a->core);
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

/* begin_single_range or end_single_range of one table: a callable bound to its Accel. */
typedef struct {
  PyObject_HEAD
  Accel *owner;
  vectorcallfunc call;
  vectorcallfunc vectorcall;
} Method;

static PyObject *Method_call(Method *m, PyObject *const *args, size_t nargsf, PyObject *kw) {
  if (m->owner == NULL || R(m->owner, TABLE) == NULL || m->owner->core == NULL) {
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
    .tp_doc = "MappingTable.begin_single_range or end_single_range, in C for the single-range cases.",
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

#include "hot.c"      /* (after Method: a kept data construct reads its table) */

/* accelerate(table, core, dev, plugin, kind, new_lock, begin_py, end_py, release_py,
 *            update_py, limit, stage, copier)   stage: Transfers.staging_from both ways
 * -> CompiledSteps(begin_single_range, end_single_range, update_single_range, present,
 *    launch_present, release, update_arrays, present_map, launch_present_map,
 *    call_present_map) for one MappingTable, whose state `core` (a TableCore) owns. The
 *    device's lock, allocation records, pool and statistics are taken now: they must be
 *    changed in place for the table's lifetime. */
static PyTypeObject *CompiledStepsType;

static PyObject *accelerate(PyObject *mod, PyObject *args) {
  PyObject *table, *core, *dev, *plugin, *kind, *new_lock, *begin_py, *end_py, *release_py,
      *update_py, *stage, *copier;
  Py_ssize_t limit;
  (void)mod;
  if (!PyArg_ParseTuple(args, "OO!OOOOOOOOnOO", &table, &TableCoreType, &core, &dev, &plugin,
                        &kind, &new_lock, &begin_py, &end_py, &release_py, &update_py, &limit,
                        &stage, &copier))
    return NULL;
  Accel *a = PyObject_GC_New(Accel, &AccelType);
  if (!a)
    return NULL;
  for (int i = 0; i < NREFS; i++)
    a->ref[i] = NULL;
  a->core = (TableCore *)Py_NewRef(core);
  a->limit = limit;
  a->dlock = NULL;
  memset(&a->copier, 0, sizeof a->copier);
  a->stage[0] = a->stage[1] = -1;
  PyObject_GC_Track(a);
  if (!PyTuple_Check(stage) || PyTuple_GET_SIZE(stage) != 2) {
    PyErr_SetString(PyExc_TypeError, "accelerate: stage is (to the device, from it)");
    goto bad;
  }
  for (int i = 0; i < 2; i++) {
    PyObject *v = PyTuple_GET_ITEM(stage, i);
    if (v != Py_None && (a->stage[i] = PyLong_AsSsize_t(v)) == -1 && PyErr_Occurred())
      goto bad;
  }
  PyObject *given[NREFS] = {NULL};
  given[TABLE] = table; given[DEV] = dev; given[PLUGIN] = plugin;
  given[KIND] = kind; given[NEW_LOCK] = new_lock;
  given[BEGIN_PY] = begin_py; given[END_PY] = end_py; given[RELEASE_PY] = release_py;
  given[UPDATE_PY] = update_py;
  for (int i = 0; i < NREFS; i++) {
    if (given[i]) {
      Py_INCREF(given[i]);
      a->ref[i] = given[i];
    }
  }
  PyObject *dev_lock = NULL, *pool = NULL;
  int ok = (dev_lock = PyObject_GetAttr(dev, s_lock_attr)) &&
           (a->ref[DEV_ACQUIRE] = PyObject_GetAttr(dev_lock, s_acquire)) &&
           (a->ref[DEV_RELEASE] = PyObject_GetAttr(dev_lock, s_release)) &&
           (a->ref[ALLOCS] = PyObject_GetAttr(dev, s_allocs)) &&
           (pool = PyObject_GetAttr(dev, s_pool)) &&
           (a->ref[POOL_FREE] = PyObject_GetAttr(pool, s_free)) &&
           (a->ref[STATS] = PyObject_GetAttr(dev, s_stats));
  if (pool) {
    a->ref[POOL] = pool;
    pool = NULL;
  }
  a->dlock = ok && Py_IS_TYPE(dev_lock, &LockType) ? (Lock *)dev_lock : NULL;  /* kept alive by DEV_ACQUIRE */
  Py_XDECREF(dev_lock);
  if (!ok)
    goto bad;
  if (!PyDict_CheckExact(R(a, ALLOCS)) || !PyDict_CheckExact(R(a, POOL_FREE)) ||
      !PyDict_CheckExact(R(a, STATS))) {
    PyErr_SetString(PyExc_TypeError, "offload accelerator: unexpected device");
    goto bad;
  }
  /* ("memcpy",) or ("cuda", set_ctx, ctx, h2d, d2h, query, spin, streams, stream_objects,
   *  poll, check, drv, device, pin_split, launch, memset[, bounce]), or None */
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
      unsigned long long launch = 0, memset_ = 0;
      PyObject *bounce = Py_None;
      if (!PyArg_ParseTuple(copier, "sKKKKKdO!O!OOOlLKK|O", &how, &set_ctx, &ctx, &h2d, &d2h,
                            &query, &c->spin, &PyTuple_Type, &addrs, &PyTuple_Type, &objs,
                            &poll, &check, &drv, &c->device, &c->split, &launch, &memset_,
                            &bounce))
        goto bad;
      if (bounce != Py_None)
        a->ref[BOUNCE_PY] = Py_NewRef(bounce);
      c->launch = launch;
      c->memset = memset_;
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
  PyObject *lp = bound(a, (vectorcallfunc)Accel_launch_present);
  PyObject *rl = bound(a, (vectorcallfunc)Accel_release);
  PyObject *ua = bound(a, (vectorcallfunc)Accel_update_arrays);
  PyObject *pm = bound(a, (vectorcallfunc)Accel_present_map);
  PyObject *lm = bound(a, (vectorcallfunc)Accel_launch_present_map);
  PyObject *cm = bound(a, (vectorcallfunc)Accel_call_present_map);
  Py_DECREF(a);
  PyObject *steps[] = {b, e, u, pr, lp, rl, ua, pm, lm, cm};
  int n = (int)(sizeof steps / sizeof *steps), missing = 0;
  PyObject *r = NULL;
  for (int i = 0; i < n; i++)
    missing |= !steps[i];
  if (!missing)
    r = PyStructSequence_New(CompiledStepsType);
  for (int i = 0; i < n; i++) {
    if (r)
      PyStructSequence_SetItem(r, i, steps[i]);
    else
      Py_XDECREF(steps[i]);
  }
  return r;
bad_copier:
  PyErr_SetString(PyExc_ValueError, "offload accelerator: a copier is None, ('memcpy',) or "
                  "('cuda', ...)");
bad:
  Py_DECREF(a);
  return NULL;
}

static PyMethodDef methods[] = {
    {"dlpack_setup", dlpack_setup, METH_VARARGS,
     "dlpack_setup(release, destroy) -> (deleter, capsule destructor): C entries for DLPack "
     "consumers that keep the thread's exception, calling release(managed tensor's address) "
     "and destroy(capsule's address)."},
    {"steps_setup", steps_setup, METH_VARARGS,
     "steps_setup(pending, drain): offload.locks' deferred finalizer work and its runner"},
    {"step_depth", steps_depth, METH_NOARGS, "step_depth() -> this thread's locked steps"},
    {"single_range_setup", single_range_setup, METH_VARARGS,
     "single_range_setup(ndarray, not_single_range, python_single_range): the array type, "
     "the map-type bits single_range refuses, "
     "refuses, MapClause.single_range for arrays without a C-contiguous buffer."},
    {"single_range", single_range, METH_O,
     "single_range(clause) -> MapClause.single_range(clause): (address, size, type, array, read-only) or "
     "None."},
    {"copy_back_hook", set_copy_back_hook, METH_O,
     "copy_back_hook(hook or None), tests: hook(host, tgt, size) runs before each copy back "
     "made outside the table's lock, its entry held; what it raises fails that copy."},
    {"hot_setup", hot_setup, METH_VARARGS,
     "hot_setup(process, registry, ompt, profile, inject, failed, general, data_failed, "
     "kinds): what a kept construct's checks read, failed(loc, export, exception) -> the "
     "export's result (data_failed: a data construct's), the answer for nothing done, and "
     "each data export's kind (b, e, u)."},
    {"hot_keep", hot_keep, METH_VARARGS,
     "hot_keep(dev, region, teams, threads, trip, step, extra, rt, gen, version): a region "
     "the library runs again as step(n, bases, begins, sizes, types, mappers, *extra)."},
    {"hot_forget", hot_forget, METH_NOARGS, "hot_forget(): every kept region forgotten."},
    {"hot_ran", hot_ran, METH_NOARGS, "hot_ran() -> how many regions the entry has run."},
    {"hot_data_ran", hot_data_ran, METH_NOARGS,
     "hot_data_ran() -> how many data constructs the entry has run."},
    {"hot_keep_data", hot_keep_data, METH_VARARGS,
     "hot_keep_data(dev, begin, end, update, table, rt, version) -> whether kept: a device's "
     "data constructs of one plain section, run by the library as step(p, n, t[, None])."},
    {"hot_data_address", hot_data_address, METH_NOARGS,
     "hot_data_address() -> the address of the library's entry for kept data constructs."},
    {"hot_address", hot_address, METH_NOARGS,
     "hot_address() -> the address of the library's entry for kept regions."},
    {"accelerate", accelerate, METH_VARARGS,
     "accelerate(table, core, dev, plugin, kind, new_lock, begin_py, end_py, "
     "release_py, update_py, limit, stage, copier) -> CompiledSteps for one MappingTable."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_accel_c", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

static PyStructSequence_Field steps_fields[] = {
    {"begin_single_range", "MappingTable.begin_single_range, in C"},
    {"end_single_range", "MappingTable.end_single_range, in C"},
    {"update_single_range", "MappingTable.update_single_range, in C"},
    {"present", "present(args) -> PresentArgs or None: a region's arguments on mapped data"},
    {"launch_present", "launch_present(args, spec) -> bool: and the kernel launched"},
    {"release", "release(marked): MappingTable.release_busy, in C"},
    {"update_arrays", "update_arrays(to, from_) -> True, or None: target_update of whole arrays"},
    {"present_map", "present_map(n, bases, begins, sizes, types, mappers) -> PresentArgs, "
                    "None, or the one component to map first: a C-ABI kernel region on "
                    "mapped data"},
    {"launch_present_map", "launch_present_map(n, bases, begins, sizes, types, mappers, spec, "
                           "first) -> True, False, None or the one component to map "
                           "first: and the kernel launched"},
    {"call_present_map", "call_present_map(n, bases, begins, sizes, types, mappers, call, "
                         "nargs) -> True, False, None or the one component to map first: "
                         "and the kernel called directly"},
    {NULL, NULL}};
static PyStructSequence_Desc steps_desc = {
    "offload._accel_c.CompiledSteps", "A table's steps in the compiled core (accelerate).",
    steps_fields, 10};
static PyStructSequence_Field present_fields[] = {
    {"kernel_args", "the region's arguments, arrays as their device addresses"},
    {"marked", "the entries marked in use for it (give them to release)"},
    {NULL, NULL}};
static PyStructSequence_Desc present_desc = {
    "offload._accel_c.PresentArgs", "A region's arguments found on mapped data (present).",
    present_fields, 2};

PyMODINIT_FUNC PyInit__accel_c(void) {
  if (interface_setup() < 0)
    return NULL;
  if (!CompiledStepsType && !(CompiledStepsType = PyStructSequence_NewType(&steps_desc)))
    return NULL;
  if (!PresentArgsType && !(PresentArgsType = PyStructSequence_NewType(&present_desc)))
    return NULL;
  PyObject *fields = entry_fields(), *names = interface_names();
  if (!fields || !names || PyType_Ready(&AccelType) < 0 || PyType_Ready(&MethodType) < 0 ||
      PyType_Ready(&OperationType) < 0 || PyType_Ready(&LockType) < 0 ||
      PyType_Ready(&EntryType) < 0 || PyType_Ready(&TableCoreType) < 0) {
    Py_XDECREF(fields);
    Py_XDECREF(names);
    return NULL;
  }
  PyObject *m = PyModule_Create(&module);
  if (m && (PyModule_AddObjectRef(m, "Operation", (PyObject *)&OperationType) < 0 ||
            PyModule_AddObjectRef(m, "Lock", (PyObject *)&LockType) < 0 ||
            PyModule_AddObjectRef(m, "TableCore", (PyObject *)&TableCoreType) < 0 ||
            PyModule_AddObjectRef(m, "HostDataToTarget", (PyObject *)&EntryType) < 0 ||
            PyModule_AddObjectRef(m, "CompiledSteps", (PyObject *)CompiledStepsType) < 0 ||
            PyModule_AddObjectRef(m, "PresentArgs", (PyObject *)PresentArgsType) < 0 ||
            PyModule_AddObjectRef(m, "ENTRY_FIELDS", fields) < 0 ||
            PyModule_AddObjectRef(m, "INTERFACE", names) < 0)) {
    Py_DECREF(m);
    m = NULL;
  }
  Py_DECREF(fields);
  Py_DECREF(names);
  return m;
}
