/* Part of the HSA simulator (hsa_sim.c includes it): code objects, executables, symbols
 * and queues. A TEST DOUBLE of libhsa-runtime64; see hsa_sim.c. */

/* ---- code objects, executables, symbols --------------------------------------- */
typedef struct { char name[128]; uint32_t kernarg_size, group_size, private_size; int dynamic; } kernel_t;
typedef struct { const char *data; size_t n; } reader_t;   /* ROCr borrows the code object */
typedef struct { kernel_t k[64]; int nk; int frozen; } exec_t;

hsa_status_t hsa_code_object_reader_create_from_memory(const void *code, size_t size, hsa_code_object_reader_t *r) {
  ENTER("hsa_code_object_reader_create_from_memory");
  if (!code || !size || !r) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  reader_t *rd = malloc(sizeof *rd);
  rd->data = code;
  rd->n = size;
  r->handle = (uint64_t)(uintptr_t)rd;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t r) {
  ENTER("hsa_code_object_reader_destroy");
  free((reader_t *)(uintptr_t)r.handle);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_create_alt(hsa_profile_t profile, hsa_default_float_rounding_mode_t mode,
    const char *options, hsa_executable_t *e) {
  ENTER("hsa_executable_create_alt");
  exec_t *x = calloc(1, sizeof *x);
  e->handle = (uint64_t)(uintptr_t)x;
  return HSA_STATUS_SUCCESS;
}

#include <elf.h>
hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t e, hsa_agent_t agent,
    hsa_code_object_reader_t r, const char *options, hsa_loaded_code_object_t *loaded) {
  ENTER("hsa_executable_load_agent_code_object");
  exec_t *x = (exec_t *)(uintptr_t)e.handle;
  reader_t *rd = (reader_t *)(uintptr_t)r.handle;
  if (agent_index(agent) < 1) return HSA_STATUS_ERROR_INVALID_AGENT;
  const Elf64_Ehdr *h = (const Elf64_Ehdr *)rd->data;
  if (rd->n < sizeof *h || memcmp(h->e_ident, ELFMAG, SELFMAG) || h->e_machine != 224 /* EM_AMDGPU */)
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(rd->data + h->e_shoff);
  for (int i = 0; i < h->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
    const Elf64_Sym *sym = (const Elf64_Sym *)(rd->data + sh[i].sh_offset);
    const char *strs = rd->data + sh[sh[i].sh_link].sh_offset;
    for (size_t j = 0; j < sh[i].sh_size / sizeof *sym; j++) {
      const char *name = strs + sym[j].st_name;
      size_t len = strlen(name);
      if (len < 4 || strcmp(name + len - 3, ".kd") || x->nk >= 64) continue;
      int dup = 0;
      for (int k = 0; k < x->nk; k++) dup |= !strcmp(x->k[k].name, name);
      if (dup) continue;
      kernel_t *k = &x->k[x->nk++];
      memset(k, 0, sizeof *k);
      strncpy(k->name, name, 127);
      pthread_mutex_lock(&mu);
      for (int d = 0; d < 64; d++)
        if (dynamic_stack[d][0] && !strncmp(dynamic_stack[d], name, len - 3) && !dynamic_stack[d][len - 3]) k->dynamic = 1;
      pthread_mutex_unlock(&mu);
      for (int s2 = 0; s2 < h->e_shnum; s2++) /* the 64-byte kernel descriptor */
        if (sh[s2].sh_type == SHT_PROGBITS && sym[j].st_value >= sh[s2].sh_addr && sym[j].st_value + 64 <= sh[s2].sh_addr + sh[s2].sh_size) {
          const char *kd = rd->data + sh[s2].sh_offset + (sym[j].st_value - sh[s2].sh_addr);
          memcpy(&k->group_size, kd + 0, 4);
          memcpy(&k->private_size, kd + 4, 4);
          memcpy(&k->kernarg_size, kd + 8, 4);
        }
    }
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_freeze(hsa_executable_t e, const char *options) {
  ENTER("hsa_executable_freeze");
  ((exec_t *)(uintptr_t)e.handle)->frozen = 1;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_validate(hsa_executable_t e, uint32_t *result) {
  ENTER("hsa_executable_validate");
  if (!result) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *result = ((exec_t *)(uintptr_t)e.handle)->frozen ? 0 : 1;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_destroy(hsa_executable_t e) {
  ENTER("hsa_executable_destroy");
  free((exec_t *)(uintptr_t)e.handle);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t e, const char *name, const hsa_agent_t *agent,
    hsa_executable_symbol_t *sym) {
  ENTER("hsa_executable_get_symbol_by_name");
  exec_t *x = (exec_t *)(uintptr_t)e.handle;
  if (!name || !sym) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (int k = 0; k < x->nk; k++)
    if (!strcmp(x->k[k].name, name)) { sym->handle = (uint64_t)(uintptr_t)&x->k[k]; return HSA_STATUS_SUCCESS; }
  return HSA_STATUS_ERROR_INVALID_SYMBOL_NAME;
}

hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t sym, hsa_executable_symbol_info_t attr, void *value) {
  ENTER("hsa_executable_symbol_get_info");
  kernel_t *k = (kernel_t *)(uintptr_t)sym.handle;
  switch ((int)attr) {
  case HSA_EXECUTABLE_SYMBOL_INFO_TYPE: *(hsa_symbol_kind_t *)value = HSA_SYMBOL_KIND_KERNEL; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: *(uint64_t *)value = sym.handle; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: *(uint32_t *)value = k->kernarg_size; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: *(uint32_t *)value = k->group_size; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: *(uint32_t *)value = k->private_size; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: *(bool *)value = k->dynamic; return HSA_STATUS_SUCCESS;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

/* ---- queues: a worker per queue runs published packets, checking them as ROCr does -- */
struct sim_queue {
  hsa_queue_t q; uint64_t write, read; int agent, stop, suspended, profiling;
  pthread_mutex_t m; pthread_cond_t c; pthread_t worker;
  void (*cb)(hsa_status_t, hsa_queue_t *, void *); void *data;
};

static void ring(struct sim_queue *q) {
  pthread_mutex_lock(&q->m);
  pthread_cond_broadcast(&q->c);
  pthread_mutex_unlock(&q->m);
}

static void queue_error(struct sim_queue *q, hsa_status_t status) {
  q->suspended = 1;                          /* ROCr suspends the queue; nothing completes */
  if (q->cb) q->cb(status, &q->q, q->data);
}

static void run_kernel(struct sim_queue *q, hsa_kernel_dispatch_packet_t *p) {
  hsa_status_t injected = __atomic_exchange_n(&fail_dispatch, 0, __ATOMIC_SEQ_CST);
  if (injected) { queue_error(q, injected); return; }
  if (p->reserved0 || p->reserved2) { queue_error(q, HSA_STATUS_ERROR_INVALID_PACKET_FORMAT); return; }
  uint32_t wg = (uint32_t)p->workgroup_size_x * p->workgroup_size_y * p->workgroup_size_z;
  if (!wg || wg > 1024 || !p->grid_size_x || !p->grid_size_y || !p->grid_size_z) {
    queue_error(q, HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS); return;
  }
  kernel_t *k = (kernel_t *)(uintptr_t)p->kernel_object;
  if (!can_access(q->agent, p->kernarg_address, k->kernarg_size ? k->kernarg_size : 8)) {
    fault("kernarg segment", q->agent, p->kernarg_address);
    queue_error(q, HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION); return;
  }
  if (k->dynamic && p->private_segment_size < 16384) {
    fault("scratch (dynamic call stack)", q->agent, NULL);
    queue_error(q, HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION); return;
  }
  char base[128];
  strncpy(base, k->name, 127);
  base[strlen(base) - 3] = 0; /* drop ".kd" */
  sim_kernel_fn fn = NULL;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < 64 && registered[i].name[0]; i++)
    if (!strcmp(registered[i].name, base)) fn = registered[i].fn;
  pthread_mutex_unlock(&mu);
  uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
  uint16_t wgs[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
  if (fn) fn(p->kernarg_address, grid, wgs);
  else fprintf(stderr, "hsa_sim: no host function registered for kernel %s\n", base);
  if (p->completion_signal.handle) {
    if (q->profiling) S(p->completion_signal)->end_ts = ticks();
    sig_add(p->completion_signal, -1, 0);
  }
}

static void *queue_worker(void *arg) {
  struct sim_queue *q = arg;
  pthread_mutex_lock(&q->m);
  for (;;) {
    while (!q->stop && (q->suspended || q->read >= __atomic_load_n(&q->write, __ATOMIC_SEQ_CST) ||
           (((hsa_kernel_dispatch_packet_t *)q->q.base_address)[q->read % q->q.size].header & 0xff) == HSA_PACKET_TYPE_INVALID))
      pthread_cond_wait(&q->c, &q->m);
    if (q->stop) break;
    hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)q->q.base_address + (q->read % q->q.size);
    uint16_t type = __atomic_load_n(&p->header, __ATOMIC_ACQUIRE) & 0xff;
    pthread_mutex_unlock(&q->m);
    jitter();
    /* a profiled packet's completion signal gets its start and end (system ticks) */
    sig_t *timed = q->profiling && p->completion_signal.handle ? S(p->completion_signal) : NULL;
    if (timed) { timed->end_ts = 0; timed->start_ts = ticks(); }
    if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH) run_kernel(q, p);
    else if (type == HSA_PACKET_TYPE_BARRIER_AND) {
      hsa_barrier_and_packet_t *b = (hsa_barrier_and_packet_t *)p;
      for (int i = 0; i < 5; i++) if (b->dep_signal[i].handle) wait_done(b->dep_signal[i]);
      if (timed) timed->end_ts = ticks();
      if (b->completion_signal.handle) sig_add(b->completion_signal, -1, 0);
    }
    pthread_mutex_lock(&q->m);
    if (q->suspended) continue;
    __atomic_store_n(&p->header, HSA_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
    __atomic_fetch_add(&q->read, 1, __ATOMIC_SEQ_CST);
  }
  pthread_mutex_unlock(&q->m);
  return NULL;
}

hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
    void (*cb)(hsa_status_t, hsa_queue_t *, void *), void *data, uint32_t private_size,
    uint32_t group_size, hsa_queue_t **queue) {
  ENTER("hsa_queue_create");
  if (agent_index(agent) < 1) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!size || (size & (size - 1)) || !queue) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_queue *q = calloc(1, sizeof *q);
  q->q.type = type;
  q->q.size = size;
  q->q.id = (uint64_t)(uintptr_t)q;
  q->agent = agent_index(agent);
  q->cb = cb;
  q->data = data;
  q->q.base_address = aligned_alloc(64, (size_t)size * 64);
  for (uint32_t i = 0; i < size; i++)
    ((hsa_kernel_dispatch_packet_t *)q->q.base_address)[i].header = HSA_PACKET_TYPE_INVALID;
  pthread_mutex_init(&q->m, NULL);
  pthread_cond_init(&q->c, NULL);
  hsa_signal_create(0, 0, NULL, &q->q.doorbell_signal);
  S(q->q.doorbell_signal)->doorbell_of = q;
  pthread_create(&q->worker, NULL, queue_worker, q);
  *queue = &q->q;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_profiling_set_profiler_enabled(hsa_queue_t *queue, int enable) {
  ENTER("hsa_amd_profiling_set_profiler_enabled");
  if (!queue) return HSA_STATUS_ERROR_INVALID_QUEUE;
  __atomic_store_n(&((struct sim_queue *)queue)->profiling, enable != 0, __ATOMIC_SEQ_CST);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_profiling_get_dispatch_time(hsa_agent_t agent, hsa_signal_t signal,
                                                 hsa_amd_profiling_dispatch_time_t *time) {
  ENTER("hsa_amd_profiling_get_dispatch_time");
  if (agent_index(agent) < 1) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!signal.handle) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  if (!time) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  sig_t *g = S(signal);
  /* strict: the packet must have been profiled and have completed */
  if (!g->end_ts || hsa_signal_load_scacquire(signal) != 0) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  time->start = g->start_ts;
  time->end = g->end_ts;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void *value) {
  ENTER("hsa_system_get_info");
  if (!value) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
  case HSA_SYSTEM_INFO_TIMESTAMP: *(uint64_t *)value = ticks(); return HSA_STATUS_SUCCESS;
  case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: *(uint64_t *)value = 1000000000ull; return HSA_STATUS_SUCCESS;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

hsa_status_t hsa_queue_destroy(hsa_queue_t *queue) {
  ENTER("hsa_queue_destroy");
  struct sim_queue *q = (struct sim_queue *)queue;
  pthread_mutex_lock(&q->m);
  q->stop = 1;
  pthread_cond_broadcast(&q->c);
  pthread_mutex_unlock(&q->m);
  pthread_join(q->worker, NULL);
  free(q->q.base_address);
  free(S(q->q.doorbell_signal));
  free(q);
  return HSA_STATUS_SUCCESS;
}

uint64_t hsa_queue_add_write_index_relaxed(const hsa_queue_t *queue, uint64_t v) {
  return __atomic_fetch_add(&((struct sim_queue *)queue)->write, v, __ATOMIC_SEQ_CST);
}
uint64_t hsa_queue_add_write_index_screlease(const hsa_queue_t *queue, uint64_t v) {
  return hsa_queue_add_write_index_relaxed(queue, v);
}
uint64_t hsa_queue_load_read_index_relaxed(const hsa_queue_t *queue) {
  return __atomic_load_n(&((struct sim_queue *)queue)->read, __ATOMIC_SEQ_CST);
}
uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *queue) {
  return hsa_queue_load_read_index_relaxed(queue);
}
