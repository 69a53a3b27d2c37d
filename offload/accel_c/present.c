/* Part of the accelerator (offload/accel_c/accel.c includes it): a region's arguments on
 * mapped data (present, launch_present) and release_busy (release). */

static PyObject *release_list(Accel *a, PyObject *entries);
static PyObject *present_args(Accel *a, PyObject *kargs, PyObject *marked);
static PyObject *launched(Accel *a, int ran, PyObject *kargs, PyObject *marked);
static PyTypeObject *PresentArgsType;     /* PresentArgs(kernel_args, marked), made at start */

/* Under the table lock: the made entry holding [p, p+n) (`inside`; else sharing a byte
 * with it) marked in use and appended to `marked`, *dev the device address of p: 1; 0
 * (error cleared) with nothing marked when there is none. */
static int mark_entry(Accel *a, uintptr_t p, uintptr_t n, int inside_only, PyObject *marked,
                      uintptr_t *dev) {
  uintptr_t begin, tgt;
  int inside;
  PyObject *e = core_find(a->core, p, n, &inside);
  if (!e || (inside_only && !inside) || !IS_ENTRY(e) || !made(F(e, READY)) ||
      !as_addr(F(e, HST_BEGIN), &begin) || !as_addr(F(e, TGT_BEGIN), &tgt) ||
      PyList_Append(marked, e) < 0) {
    PyErr_Clear();
    return 0;
  }
  if (entry_mark(e) < 0) {
    PyList_SetSlice(marked, PyList_GET_SIZE(marked) - 1, PyList_GET_SIZE(marked), NULL);
    PyErr_Clear();
    return 0;
  }
  *dev = tgt + (p - begin);
  return 1;
}

/* Under the table lock: every mark in `marked` given back (waiters woken), errors
 * cleared: the undo of mark_entry. */
static void unmark_all(Accel *a, PyObject *marked) {
  for (Py_ssize_t m = 0; m < PyList_GET_SIZE(marked); m++)
    entry_unmark(PyList_GET_ITEM(marked, m));
  if (PyList_GET_SIZE(marked))
    core_wake(a->core);
  PyErr_Clear();
}

/* The first half of _target_on_present (see target.py) over the tuple `given`: each exact
 * numpy array argument must be C-contiguous and share a byte with a made mapping: that
 * entry is marked in use (once per argument) and the argument becomes its device address;
 * exact ints and floats pass as they are. 1 with *kargs_out and *marked_out (new lists); 0
 * with nothing marked for anything else (the Python path decides); -1 with an exception. */
static int mark_present(Accel *a, PyObject *given, PyObject **kargs_out,
                        PyObject **marked_out) {
  Py_ssize_t count = PyTuple_GET_SIZE(given);
  if (a->core->observed)                         /* INFO bits or a listener */
    return 0;
  PyObject *kargs = PyList_New(count), *marked = PyList_New(0);
  if (!kargs || !marked) {
    Py_XDECREF(kargs);
    Py_XDECREF(marked);
    return -1;
  }
  uintptr_t addr[64];
  Py_ssize_t size[64];
  int any = 0;
  for (Py_ssize_t i = 0; i < count; i++) {           /* outside the lock: the buffers */
    PyObject *x = PyTuple_GET_ITEM(given, i);
    if (Py_TYPE(x) == (PyTypeObject *)ndarray_type) {
      int ro;
      if (i >= 64 || whole_array_buffer(x, 0, &addr[i], &size[i], &ro) < 0 || !addr[i])
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
  if (!try_table_lock(a))
    goto none;
  for (Py_ssize_t i = 0; i < count; i++) {
    if (PyList_GET_ITEM(kargs, i))
      continue;
    uintptr_t dev;
    PyObject *dev_addr = NULL;
    if (!mark_entry(a, addr[i], (uintptr_t)(size[i] > 0 ? size[i] : 1), 0, marked, &dev) ||
        !(dev_addr = PyLong_FromUnsignedLongLong((unsigned long long)dev))) {
      unmark_all(a, marked);
      give_table_lock(a);
      goto none;
    }
    PyList_SET_ITEM(kargs, i, dev_addr);
  }
  give_table_lock(a);
  *kargs_out = kargs;
  *marked_out = marked;
  return 1;
none:
  PyErr_Clear();
  Py_DECREF(kargs);
  Py_DECREF(marked);
  return 0;
}

/* present(args) -> PresentArgs(kernel_args, marked), the entries marked in use (given back
 * by release), or None with nothing marked (mark_present). */
static PyObject *Accel_present(Accel *a, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  if (kwnames || PyVectorcall_NARGS(nargsf) != 1 || !PyTuple_Check(args[0]) || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "present(args: tuple)");
    return NULL;
  }
  PyObject *kargs, *marked;
  int got = mark_present(a, args[0], &kargs, &marked);
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_None);
  return present_args(a, kargs, marked);
}

/* PresentArgs(kargs, marked), both references taken; NULL with the marks given back. */
static PyObject *present_args(Accel *a, PyObject *kargs, PyObject *marked) {
  PyObject *r = PyStructSequence_New(PresentArgsType);
  if (!r) {
    Py_XDECREF(release_list(a, marked));          /* the marks given back, the error kept */
    Py_DECREF(kargs);
    Py_DECREF(marked);
    return NULL;
  }
  PyStructSequence_SetItem(r, 0, kargs);
  PyStructSequence_SetItem(r, 1, marked);
  return r;
}

/* The map-type bits of a component present_map takes (LLVM 19's omptarget.h): TO, FROM,
 * TARGET_PARAM, LITERAL, IMPLICIT, CLOSE, PRESENT, OMPX_HOLD. Anything else (ALWAYS,
 * DELETE, PTR_AND_OBJ, RETURN_PARAM, PRIVATE, NON_CONTIG, MEMBER_OF) copies, attaches or
 * allocates: the general rules. */
#define MAP_LITERAL 0x100ULL
#define MAP_TARGET_PARAM 0x20ULL
#define MAP_TAKEN (0x1ULL | 0x2ULL | MAP_TARGET_PARAM | MAP_LITERAL | 0x200ULL | 0x400ULL | \
                   0x1000ULL | 0x2000ULL)
#define MAP_MAX 64
#define PRESENT_MAP_USAGE "present_map(n, bases, begins, sizes, types, mappers): a count " \
                          "and five addresses"

/* The first half of present_map over its six arguments (`args`: n and five addresses),
 * with `first` (or NULL) put before the kernel's arguments: 1 with *kargs_out and
 * *marked_out (new lists); 0 with nothing marked for a list the general rules take; 2
 * with nothing marked and *absent the (base, begin, size, type) of the list's one
 * component that shares no byte with any mapping, when `absent` is given and every other
 * lies inside a made mapping (so shares none with it) or is a literal; -1 with an
 * exception (a malformed call, or no memory). With `m` (its limit not 0), that one
 * component is made here instead when make_section takes it (m->entry: given back by
 * finish_section), and the list goes on as if it were mapped. */
static int mark_map(Accel *a, PyObject *const *args, PyObject *first, PyObject **kargs_out,
                    PyObject **marked_out, PyObject **absent, Made *m) {
  unsigned long long at[5];
  Py_ssize_t n = PyLong_AsSsize_t(args[0]);
  if (n == -1 && PyErr_Occurred())
    goto usage;
  for (int i = 0; i < 5; i++)
    if ((at[i] = PyLong_AsUnsignedLongLong(args[i + 1])) == (unsigned long long)-1 &&
        PyErr_Occurred())
      goto usage;
  void *const *bases = (void *const *)(uintptr_t)at[0];
  void *const *begins = (void *const *)(uintptr_t)at[1];
  const int64_t *sizes = (const int64_t *)(uintptr_t)at[2];
  const int64_t *types = (const int64_t *)(uintptr_t)at[3];
  void *const *mappers = (void *const *)(uintptr_t)at[4];
  if (n < 0 || n > MAP_MAX || (n && (!bases || !begins || !sizes || !types)) ||
      a->core->observed)
    return 0;
  for (Py_ssize_t i = 0; i < n; i++) {               /* outside the lock: the rule */
    uint64_t t = (uint64_t)types[i];
    if ((mappers && mappers[i]) || (t & ~MAP_TAKEN) || (!(t & MAP_LITERAL) && sizes[i] < 0))
      return 0;
  }
  PyObject *kargs = PyList_New(0), *marked = PyList_New(0);
  if (!kargs || !marked || (first && PyList_Append(kargs, first) < 0))
    goto fail;
  if (!try_table_lock(a)) {
    Py_DECREF(kargs);
    Py_DECREF(marked);
    return 0;
  }
  Py_ssize_t missing = -1;
  int refused = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    uint64_t t = (uint64_t)types[i];
    uintptr_t base = (uintptr_t)bases[i], p = (uintptr_t)begins[i], dev = 0;
    if (!(t & MAP_LITERAL) && !mark_entry(a, p, (uintptr_t)sizes[i], 1, marked, &dev)) {
      int inside;
      if (absent && missing < 0 && sizes[i] > 0 && !(m && m->entry) &&
          !core_find(a->core, p, (uintptr_t)sizes[i], &inside)) {
        if (!m || !make_section(a, base, p, sizes[i], t, m, &dev)) {
          missing = i;               /* in no mapping at all: the one to map first, if alone */
          continue;
        }
      } else {
        PyErr_Clear();
        refused = 1;
        break;
      }
    }
    if (!(t & MAP_TARGET_PARAM) || missing >= 0)
      continue;
    PyObject *v = PyLong_FromUnsignedLongLong(
        (unsigned long long)((t & MAP_LITERAL) ? base : dev - (p - base)));
    if (!v || PyList_Append(kargs, v) < 0) {
      Py_XDECREF(v);
      unmark_all(a, marked);
      give_table_lock(a);
      if (m && m->entry)
        finish_section(a, m, SECTION_UNUSED);
      goto fail;
    }
    Py_DECREF(v);
  }
  if (refused || missing >= 0) {                /* nothing marked stays marked */
    unmark_all(a, marked);
    give_table_lock(a);
    if (m && m->entry)
      finish_section(a, m, SECTION_UNUSED);
    Py_DECREF(kargs);
    Py_DECREF(marked);
    if (refused)
      return 0;
    *absent = Py_BuildValue("(KKLL)", (unsigned long long)(uintptr_t)bases[missing],
                            (unsigned long long)(uintptr_t)begins[missing],
                            (long long)sizes[missing], (long long)types[missing]);
    return *absent ? 2 : -1;
  }
  give_table_lock(a);
  *kargs_out = kargs;
  *marked_out = marked;
  return 1;
usage:
  PyErr_SetString(PyExc_TypeError, PRESENT_MAP_USAGE);
  return -1;
fail:
  Py_XDECREF(kargs);
  Py_XDECREF(marked);
  return -1;
}

/* present_map(n, bases, begins, sizes, types, mappers) -> PresentArgs or None: a kernel
 * region of the C ABI (LLVM 19's map arrays, by address; mappers 0 for none) whose every
 * component is a literal or lies inside a made mapping, with no bit that copies or
 * allocates (MAP_TAKEN) and no mapper: each mapping marked in use (once per component),
 * the kernel's arguments (TARGET_PARAM components, in order) a literal's value or the
 * device address of its base. Nothing is copied: a present mapping's counts go back where
 * they were when the region ends, so LLVM 19 copies nothing either. For a list of which
 * exactly one component (of some bytes) shares no byte with any mapping and the others
 * lie inside made mappings, its (base, begin, size, type), nothing marked: the caller may
 * map it first and ask again. None, with nothing marked, for any other list or an observed table (the general
 * rules decide). */
static PyObject *Accel_present_map(Accel *a, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
  PyObject *kargs, *marked;
  if (kwnames || PyVectorcall_NARGS(nargsf) != 6) {
    PyErr_SetString(PyExc_TypeError, PRESENT_MAP_USAGE);
    return NULL;
  }
  PyObject *absent;
  int got = mark_map(a, args, NULL, &kargs, &marked, &absent, NULL);
  if (got == 2)
    return absent;
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_None);
  return present_args(a, kargs, marked);
}

/* launch_present_map(n, bases, begins, sizes, types, mappers, spec, first[, scratch]) ->
 * True, False or None: as present_map, and the kernel of `spec` (a LaunchSpec) launched
 * here on `first` (an int: an OpenMP kernel's launch environment; with `scratch`, a
 * ReductionScratch, the taken stream's environment instead) and the region's arguments,
 * waited for, its marks given back: True once it ran; False with nothing done when the
 * list is taken but the launch is not the core's (the caller launches); present_map's
 * (base, begin, size, type) of the one component to map first; None for a list the
 * general rules take. */
static PyObject *Accel_launch_present_map(Accel *a, PyObject *const *args, size_t nargsf,
                                          PyObject *kwnames) {
  PyObject *kargs, *marked;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames || (nargs != 8 && nargs != 9) || !PyLong_CheckExact(args[7])) {
    PyErr_SetString(PyExc_TypeError, "launch_present_map(n, bases, begins, sizes, types, "
                    "mappers, spec, first[, scratch]): a count, five addresses, a "
                    "LaunchSpec, an int, a ReductionScratch or None");
    return NULL;
  }
  if (a->copier.kind != COPY_CUDA)
    return Py_NewRef(Py_False);
  PyObject *absent, *scratch = nargs == 9 ? args[8] : NULL;
  Made m = {section_limit(a, 0), NULL, 0, 0, 0, 0, NULL, -1, 0, 0};
  take_area(a, scratch, &m);
  int got = mark_map(a, args, args[7], &kargs, &marked, &absent, &m);
  if (got == 2 && !a->copier.bounce_bytes) {    /* the first section: the bounce asked for */
    Py_DECREF(absent);
    give_area(a, &m);
    if ((m.limit = section_limit(a, 1)) < 0)
      return NULL;
    take_area(a, scratch, &m);
    got = mark_map(a, args, args[7], &kargs, &marked, &absent, &m);
  }
  if (!m.entry)
    give_area(a, &m);
  if (got == 2)
    return absent;
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_None);
  int ran = launch_now(a, args[6], kargs, scratch, m.entry ? &m : NULL);
  give_area(a, &m);                   /* when the launch did not come to use its stream */
  if (m.entry && finish_section(a, &m, ran > 0 ? SECTION_RAN : ran == 0 ? SECTION_UNUSED
                                                                        : SECTION_FAILED) < 0)
    ran = -1;
  return launched(a, ran, kargs, marked);
}

/* launch_present(args, spec) -> bool: as present(args), and the kernel of `spec` (a
 * LaunchSpec) launched here on the arguments, its marks given back: True once it ran;
 * False with nothing done (the Python path launches). */
static PyObject *Accel_launch_present(Accel *a, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
  if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || !PyTuple_Check(args[0]) ||
      args[1] == Py_None || !ndarray_type) {
    PyErr_SetString(PyExc_TypeError, "launch_present(args: tuple, spec: LaunchSpec)");
    return NULL;
  }
  PyObject *kargs, *marked;
  int got = mark_present(a, args[0], &kargs, &marked);
  if (got <= 0)
    return got < 0 ? NULL : Py_NewRef(Py_False);
  return launched(a, launch_now(a, args[1], kargs, NULL, NULL), kargs, marked);
}

/* After launch_now gave `ran`: the marks given back and both lists let go; True (ran),
 * False (0: the caller launches), or NULL with launch_now's exception kept. */
static PyObject *launched(Accel *a, int ran, PyObject *kargs, PyObject *marked) {
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
  return Py_NewRef(ran ? Py_True : Py_False);    /* 0: released, the Python path launches */
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
  if (wait_table_lock(a) < 0)                                        /* blocking, as Python */
    return NULL;
  int bad = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries) && !bad; i++)
    bad = entry_unmark(PyList_GET_ITEM(entries, i)) < 0;
  bad = core_wake(a->core) < 0 || bad;
  give_table_lock(a);
  if (bad)
    return NULL;
  Py_RETURN_NONE;
}
