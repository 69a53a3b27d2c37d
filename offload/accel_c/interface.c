/* Part of the compiled mapping core (accel.c includes it first): the core's one declared
 * interface to Python objects it does not own. Every attribute or method its C reaches by
 * name is here, with its owner: the device's memory records (GenericDevice, DevicePool),
 * the plugin's pinned ranges (PinnedMap, PinnedEntry), the CUDA driver's state, the
 * runtime's operation state, map clauses, locks and conditions, the module state a kept
 * region's checks read (hot.c), and the keyword and values the core's calls take. The
 * table's state and its entries are the core's own types (table.c): no name here belongs
 * to a mapping class. scripts/check_core_interface.py
 * (run by CI) keeps every other file of the core free of names and of attribute calls on
 * anything but these; tests/mapping/test_core_interface.py checks that each owner has
 * its names, so a renamed attribute fails a test instead of sending the core to Python. */

static PyObject *s_acquire, *s_release, *s_locked, *s_notify_all, *s_append, *s_pop;
static PyObject *s_lock_attr, *s_allocs, *s_pool, *s_stats, *s_alloc_starts,
    *s_wait_before_reuse, *s_bytes, *s_limit, *s_free;
static PyObject *s_pinned, *s_starts, *s_entries_attr, *s_host, *s_size, *s_pending, *s_dev;
static PyObject *s_dead, *s_last_kernel;
static PyObject *s_rt, *s_live, *s_closing, *s_inflight, *s_pending_attr;
static PyObject *s_version, *s_listening, *s_active, *s_arena;
static PyObject *s_array, *s_type, *s_copy_back;
static PyObject *s_to_pinned, *s_from_pinned, *s_to_unpinned, *s_from_unpinned,
    *s_to_pinned_ops, *s_from_pinned_ops, *s_to_unpinned_ops, *s_from_unpinned_ops,
    *s_to_staged, *s_from_staged, *s_to_staged_ops, *s_from_staged_ops,
    *s_pool_hits, *s_h2d_name, *s_d2h_name, *s_shutting, *s_unknown_where;

/* (variable, owner, name): the owner is a class as "module:Class", a module as "module
 * <name>", or one of "lock", "condition", "deque", "thread-local", a keyword
 * ("keyword:<function>") or a value ("stats key", "message"). */
typedef struct {
  PyObject **var;
  const char *owner;
  const char *name;
} Name;

static const Name core_interface[] = {
    {&s_acquire, "lock", "acquire"},
    {&s_release, "lock", "release"},
    {&s_locked, "lock", "locked"},
    {&s_notify_all, "condition", "notify_all"},
    {&s_append, "deque", "append"},
    {&s_pop, "deque", "pop"},
    {&s_lock_attr, "offload.plugins.generic_device:GenericDevice", "_lock"},
    {&s_allocs, "offload.plugins.generic_device:GenericDevice", "_allocs"},
    {&s_pool, "offload.plugins.generic_device:GenericDevice", "pool"},
    {&s_stats, "offload.plugins.generic_device:GenericDevice", "stats"},
    {&s_alloc_starts, "offload.plugins.generic_device:GenericDevice", "_alloc_starts"},
    {&s_wait_before_reuse, "offload.plugins.generic_device:GenericDevice",
     "_wait_before_reuse"},
    {&s_bytes, "offload.plugins.memory_pool:DevicePool", "bytes"},
    {&s_limit, "offload.plugins.memory_pool:DevicePool", "limit"},
    {&s_free, "offload.plugins.memory_pool:DevicePool", "_free"},
    {&s_pinned, "offload.plugins.common:GenericPlugin", "pinned"},
    {&s_starts, "offload.pinned:PinnedMap", "_starts"},
    {&s_entries_attr, "offload.pinned:PinnedMap", "_entries"},
    {&s_host, "offload.pinned:PinnedEntry", "host"},
    {&s_size, "offload.pinned:PinnedEntry", "size"},
    {&s_pending, "offload.pinned:PinnedEntry", "pending"},
    {&s_dev, "offload.pinned:PinnedEntry", "dev"},
    {&s_dead, "offload.plugins._cuda_driver:Driver", "dead"},
    {&s_last_kernel, "offload.plugins._cuda_driver:Driver", "last_kernel"},
    {&s_rt, "thread-local", "rt"},
    {&s_live, "offload.runtime:_Process", "live"},
    {&s_closing, "offload.runtime:Runtime", "closing"},
    {&s_inflight, "offload.runtime:Runtime", "_inflight"},
    {&s_pending_attr, "offload.interrupts:_Sigint", "pending"},
    {&s_version, "offload.capi.images:Registry", "version"},
    {&s_listening, "module offload.capi.ompt", "listening"},
    {&s_active, "module offload.profile", "active"},
    {&s_arena, "offload.plugins.generic_device:GenericDevice", "arena"},
    {&s_array, "offload.clauses:MapClause", "array"},
    {&s_type, "offload.clauses:MapClause", "type"},
    {&s_copy_back, "keyword:end_single_range", "copy_back"},
    {&s_to_pinned, "stats key", "to pinned"},
    {&s_from_pinned, "stats key", "from pinned"},
    {&s_to_unpinned, "stats key", "to unpinned"},
    {&s_from_unpinned, "stats key", "from unpinned"},
    {&s_to_pinned_ops, "stats key", "to pinned ops"},
    {&s_from_pinned_ops, "stats key", "from pinned ops"},
    {&s_to_unpinned_ops, "stats key", "to unpinned ops"},
    {&s_from_unpinned_ops, "stats key", "from unpinned ops"},
    {&s_to_staged, "stats key", "to staged"},
    {&s_from_staged, "stats key", "from staged"},
    {&s_to_staged_ops, "stats key", "to staged ops"},
    {&s_from_staged_ops, "stats key", "from staged ops"},
    {&s_pool_hits, "stats key", "pool hits"},
    {&s_h2d_name, "message", "cuMemcpyHtoDAsync"},
    {&s_d2h_name, "message", "cuMemcpyDtoHAsync"},
    {&s_shutting, "message", "is shutting down"},
    {&s_unknown_where, "message", "unknown:0:0"},
};

#define NNAMES ((int)(sizeof core_interface / sizeof core_interface[0]))

/* Every name interned (0), or -1 with an exception. */
static int interface_setup(void) {
  for (int i = 0; i < NNAMES; i++)
    if (!(*core_interface[i].var = PyUnicode_InternFromString(core_interface[i].name)))
      return -1;
  return 0;
}

/* The interface as a tuple of (owner, name) pairs, for the test that checks the owners. */
static PyObject *interface_names(void) {
  PyObject *out = PyTuple_New(NNAMES);
  for (int i = 0; out && i < NNAMES; i++) {
    PyObject *pair = Py_BuildValue("(ss)", core_interface[i].owner, core_interface[i].name);
    if (!pair) {
      Py_CLEAR(out);
      break;
    }
    PyTuple_SET_ITEM(out, i, pair);
  }
  return out;
}
