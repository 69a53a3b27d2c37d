/* OMPT in offload's libomptarget.so.19.1 (part of the library's C source; see ompt.py).
   As LLVM 19's offload/src/OpenMP/OMPT/Callback.cpp: the library connects to libomp
   through ompt_libomp_connect, takes the tool's target callbacks from libomp's
   ompt_get_callback, and calls them, EMI form first, with per-thread region state
   (task data, target task data, target data, host operation id) and the return address
   of the export the program called. One difference: a non-EMI tool gets a fresh target
   id for `target enter data` too (LLVM 19 passes 0 there). */
#include <dlfcn.h>
#include <stdatomic.h>
#ifndef RTLD_DEFAULT
#define RTLD_DEFAULT ((void *)0)
#endif

typedef union { uint64_t value; void *ptr; } offload_ompt_data;
typedef void (*offload_ompt_fn)(void);
typedef offload_ompt_fn (*offload_ompt_lookup)(const char *);
typedef struct {
  int (*initialize)(offload_ompt_lookup, int, offload_ompt_data *);
  void (*finalize)(offload_ompt_data *);
  offload_ompt_data tool_data;
} offload_ompt_result;

enum { SCOPE_BEGIN = 1, SCOPE_END = 2 };
/* ompt_callbacks_t codes */
enum { CB_TARGET = 8, CB_DATA_OP = 9, CB_SUBMIT = 10, CB_DEVICE_INIT = 12,
       CB_DEVICE_FINI = 13, CB_DEVICE_LOAD = 14, CB_TARGET_EMI = 33, CB_DATA_OP_EMI = 34,
       CB_SUBMIT_EMI = 35 };

/* the export the program called, while it runs (the outermost one) */
static __thread const void *offload_return_address;

static struct {
  void (*target)(int, int, int, offload_ompt_data *, uint64_t, const void *);
  void (*target_emi)(int, int, int, offload_ompt_data *, offload_ompt_data *,
                     offload_ompt_data *, const void *);
  void (*data_op)(uint64_t, uint64_t, int, void *, int, void *, int, size_t, const void *);
  void (*data_op_emi)(int, offload_ompt_data *, offload_ompt_data *, uint64_t *, int, void *,
                      int, void *, int, size_t, const void *);
  void (*submit)(uint64_t, uint64_t, unsigned);
  void (*submit_emi)(int, offload_ompt_data *, uint64_t *, unsigned);
  void (*device_init)(int, const char *, void *, offload_ompt_lookup, const char *);
  void (*device_fini)(int);
  void (*device_load)(int, const char *, int64_t, void *, size_t, void *, void *, uint64_t);
} cb;

static int (*get_callback)(int, offload_ompt_fn *);
static offload_ompt_data *(*get_task_data)(void);
static offload_ompt_data *(*get_target_task_data)(void);
static offload_ompt_lookup lookup_by_name;
static atomic_int ompt_on;                 /* libomp initialized us and has not finalized */
static atomic_ullong next_id = 1;
static void (*plugin_finalizers[16])(offload_ompt_data *);
static atomic_int n_plugin_finalizers;
static char device_handles[256];           /* each device's ompt_device_t * */

static __thread offload_ompt_data *t_task, *t_target_task;
static __thread offload_ompt_data t_target;
static __thread uint64_t t_host_op;

static int offload_ompt_initialize(offload_ompt_lookup lookup, int initial_device,
                                   offload_ompt_data *tool_data) {
  (void)initial_device; (void)tool_data;
  get_callback = (int (*)(int, offload_ompt_fn *))lookup("ompt_get_callback");
  get_task_data = (offload_ompt_data * (*)(void)) lookup("ompt_get_task_data");
  get_target_task_data = (offload_ompt_data * (*)(void)) lookup("ompt_get_target_task_data");
  lookup_by_name = lookup;
  atomic_store(&ompt_on, get_callback && get_task_data && get_target_task_data);
  return 0;
}

static void offload_ompt_finalize(offload_ompt_data *tool_data) {
  (void)tool_data;
  int n = atomic_load(&n_plugin_finalizers);
  for (int i = 0; i < n && i < 16; ++i)
    plugin_finalizers[i](NULL);
  atomic_store(&ompt_on, 0);
}

/* Connect to libomp (once); 1 when the tool registered any callback this library calls. */
int offload_ompt_connect(void) {
  static offload_ompt_result result = {offload_ompt_initialize, offload_ompt_finalize, {0}};
  static int connected;
  if (!connected) {
    connected = 1;
    void (*connect)(offload_ompt_result *) =
        (void (*)(offload_ompt_result *))dlsym(RTLD_DEFAULT, "ompt_libomp_connect");
    if (connect)
      connect(&result);
    if (atomic_load(&ompt_on)) {
#define BIND(code, field) get_callback(code, (offload_ompt_fn *)&cb.field)
      BIND(CB_TARGET, target); BIND(CB_TARGET_EMI, target_emi);
      BIND(CB_DATA_OP, data_op); BIND(CB_DATA_OP_EMI, data_op_emi);
      BIND(CB_SUBMIT, submit); BIND(CB_SUBMIT_EMI, submit_emi);
      BIND(CB_DEVICE_INIT, device_init); BIND(CB_DEVICE_FINI, device_fini);
      BIND(CB_DEVICE_LOAD, device_load);
#undef BIND
    }
  }
  return atomic_load(&ompt_on) &&
         (cb.target || cb.target_emi || cb.data_op || cb.data_op_emi || cb.submit ||
          cb.submit_emi || cb.device_init || cb.device_fini || cb.device_load);
}

/* ompt_libomptarget_connect: a plugin library asks for the tool's callbacks. */
__attribute__((visibility("default"))) void ompt_libomptarget_connect(void *arg) {
  offload_ompt_result *result = (offload_ompt_result *)arg;
  if (!atomic_load(&ompt_on) || !result)
    return;
  int i = atomic_fetch_add(&n_plugin_finalizers, 1);
  if (i < 16 && result->finalize)
    plugin_finalizers[i] = result->finalize;
  result->initialize(lookup_by_name, 0, NULL);
}

void offload_ompt_target(int kind, int begin, int device) {
  if (!atomic_load(&ompt_on))
    return;
  const void *ra = offload_return_address;
  if (begin) {
    t_task = get_task_data();
    t_target_task = get_target_task_data();
    t_target.value = 0;
    if (cb.target_emi) {
      cb.target_emi(kind, SCOPE_BEGIN, device, t_task, t_target_task, &t_target, ra);
    } else if (cb.target) {
      t_target.value = atomic_fetch_add(&next_id, 1);
      cb.target(kind, SCOPE_BEGIN, device, t_task, t_target.value, ra);
    }
    return;
  }
  if (cb.target_emi)
    cb.target_emi(kind, SCOPE_END, device, t_task, t_target_task, &t_target, ra);
  else if (cb.target)
    cb.target(kind, SCOPE_END, device, t_task, t_target.value, ra);
  t_task = t_target_task = NULL;
  t_target.value = 0;
}

void offload_ompt_data_op(int begin, int op, uintptr_t src, int src_device, uintptr_t dst,
                          int dst_device, size_t size) {
  if (!atomic_load(&ompt_on))
    return;
  if (cb.data_op_emi) {
    cb.data_op_emi(begin ? SCOPE_BEGIN : SCOPE_END, t_target_task, &t_target, &t_host_op, op,
                   (void *)src, src_device, (void *)dst, dst_device, size,
                   offload_return_address);
  } else if (begin && cb.data_op) {
    t_host_op = atomic_fetch_add(&next_id, 1);
    cb.data_op(t_target.value, t_host_op, op, (void *)src, src_device, (void *)dst,
               dst_device, size, offload_return_address);
  }
}

void offload_ompt_submit(int begin, unsigned teams) {
  if (!atomic_load(&ompt_on))
    return;
  if (cb.submit_emi) {
    cb.submit_emi(begin ? SCOPE_BEGIN : SCOPE_END, &t_target, &t_host_op, teams);
  } else if (begin && cb.submit) {
    t_host_op = atomic_fetch_add(&next_id, 1);
    cb.submit(t_target.value, t_host_op, teams);
  }
}

void offload_ompt_device_initialize(int device, const char *type) {
  if (atomic_load(&ompt_on) && cb.device_init)
    cb.device_init(device, type, &device_handles[device & 255], lookup_by_name, NULL);
}

void offload_ompt_device_finalize(int device) {
  if (atomic_load(&ompt_on) && cb.device_fini)
    cb.device_fini(device);
}

void offload_ompt_device_load(int device, uintptr_t image, size_t size) {
  if (atomic_load(&ompt_on) && cb.device_load)
    cb.device_load(device, NULL, 0, NULL, size, (void *)image, NULL, 0);
}
