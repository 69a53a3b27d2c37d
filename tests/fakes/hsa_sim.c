/* HSA simulator: a TEST DOUBLE of libhsa-runtime64 for the AMDGPU plugin's tests.
 *
 * Built against the real HSA headers, so every entry point has ROCr's exact
 * signature. Scope (and no more): init/shut_down/status strings; one CPU and
 * two GPU agents with ISA names; agent info and pool iteration; pool
 * allocate/free/allow_access (real host memory); signals; memory lock/unlock
 * with ROCr's counting (an identical range locked twice needs two unlocks,
 * overlaps permitted, an agent address per lock); pointer info; async copies
 * that really copy; code-object reader, executable, symbols; queues whose
 * dispatch packets run a host function registered for the kernel symbol.
 *
 * Test hooks: hsa_sim_register_kernel, hsa_sim_fail, hsa_sim_calls,
 * hsa_sim_lock_count, hsa_sim_last_copy_deps. HSA_SIM_GPU_ISA overrides the GPUs' ISA name.
 */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAGENTS 3 /* 0: CPU, 1 and 2: GPUs */
#define AGENT_OFFSET ((uint64_t)1 << 44)
#define MAXN 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int init_count;

/* ---- test hooks ------------------------------------------------------ */
static struct { char name[64]; long n; } calls[128];
static char fail_name[64];
static hsa_status_t fail_status;

static hsa_status_t enter(const char *name) {
  pthread_mutex_lock(&mu);
  int i;
  for (i = 0; i < 128 && calls[i].name[0]; i++)
    if (!strcmp(calls[i].name, name)) break;
  if (i < 128) { strncpy(calls[i].name, name, 63); calls[i].n++; }
  hsa_status_t s = HSA_STATUS_SUCCESS;
  if (fail_name[0] && !strcmp(fail_name, name)) { s = fail_status; fail_name[0] = 0; }
  else if (!init_count && strcmp(name, "hsa_init") && strcmp(name, "hsa_status_string"))
    s = HSA_STATUS_ERROR_NOT_INITIALIZED;
  pthread_mutex_unlock(&mu);
  return s;
}
#define ENTER(name) do { hsa_status_t s_ = enter(name); if (s_) return s_; } while (0)

void hsa_sim_fail(const char *name, hsa_status_t status) {
  pthread_mutex_lock(&mu);
  strncpy(fail_name, name, 63);
  fail_status = status;
  pthread_mutex_unlock(&mu);
}

long hsa_sim_calls(const char *name) {
  long n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < 128 && calls[i].name[0]; i++)
    if (!strcmp(calls[i].name, name)) n = calls[i].n;
  pthread_mutex_unlock(&mu);
  return n;
}

typedef void (*sim_kernel_fn)(const void *kernarg, const uint32_t grid[3], const uint16_t wg[3]);
static struct { char name[128]; sim_kernel_fn fn; } registered[64];

int hsa_sim_register_kernel(const char *name, void *fn) {
  pthread_mutex_lock(&mu);
  int i;
  for (i = 0; i < 64 && registered[i].name[0] && strcmp(registered[i].name, name); i++) {}
  if (i < 64) { strncpy(registered[i].name, name, 127); registered[i].fn = (sim_kernel_fn)fn; }
  pthread_mutex_unlock(&mu);
  return i < 64 ? 0 : -1;
}

/* ---- status strings ---------------------------------------------------- */
hsa_status_t hsa_status_string(hsa_status_t status, const char **str) {
  switch (status) {
  case HSA_STATUS_SUCCESS: *str = "HSA_STATUS_SUCCESS: The function has been executed successfully."; break;
  case HSA_STATUS_INFO_BREAK: *str = "HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted by the application before completing."; break;
  case HSA_STATUS_ERROR: *str = "HSA_STATUS_ERROR: A generic error has occurred."; break;
  case HSA_STATUS_ERROR_INVALID_ARGUMENT: *str = "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument."; break;
  case HSA_STATUS_ERROR_INVALID_ALLOCATION: *str = "HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid."; break;
  case HSA_STATUS_ERROR_INVALID_AGENT: *str = "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid."; break;
  case HSA_STATUS_ERROR_OUT_OF_RESOURCES: *str = "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources."; break;
  case HSA_STATUS_ERROR_NOT_INITIALIZED: *str = "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero."; break;
  case HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: *str = "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: The arguments passed to a functions are not compatible."; break;
  case HSA_STATUS_ERROR_INVALID_ISA: *str = "HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid."; break;
  case HSA_STATUS_ERROR_INVALID_CODE_OBJECT: *str = "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid."; break;
  case HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: *str = "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name."; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_init(void) {
  ENTER("hsa_init");
  pthread_mutex_lock(&mu);
  init_count++;
  pthread_mutex_unlock(&mu);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_shut_down(void) {
  ENTER("hsa_shut_down");
  pthread_mutex_lock(&mu);
  init_count--;
  pthread_mutex_unlock(&mu);
  return HSA_STATUS_SUCCESS;
}

/* ---- agents, ISAs, pools ------------------------------------------------ */
static int agent_index(hsa_agent_t a) { return a.handle >= 1 && a.handle <= NAGENTS ? (int)a.handle - 1 : -1; }

static const char *gpu_isa(void) {
  const char *e = getenv("HSA_SIM_GPU_ISA");
  return e && *e ? e : "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-";
}

hsa_status_t hsa_iterate_agents(hsa_status_t (*cb)(hsa_agent_t, void *), void *data) {
  ENTER("hsa_iterate_agents");
  for (int i = 0; i < NAGENTS; i++) {
    hsa_agent_t a = {(uint64_t)i + 1};
    hsa_status_t s = cb(a, data);
    if (s != HSA_STATUS_SUCCESS) return s;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attr, void *value) {
  ENTER("hsa_agent_get_info");
  int i = agent_index(agent);
  if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  switch ((int)attr) {
  case HSA_AGENT_INFO_NAME: {
    char name[64] = {0};
    if (i == 0) strcpy(name, "HSA Simulator CPU");
    else {
      const char *isa = gpu_isa(), *g = strstr(isa, "gfx");
      size_t n = g ? strcspn(g, ":") : 0;
      memcpy(name, g ? g : "gfx?", n && n < 63 ? n : 4);
    }
    memcpy(value, name, 64);
    return HSA_STATUS_SUCCESS;
  }
  case HSA_AGENT_INFO_VENDOR_NAME: memset(value, 0, 64); strcpy(value, i ? "AMD" : "CPU"); return HSA_STATUS_SUCCESS;
  case HSA_AGENT_INFO_DEVICE: *(hsa_device_type_t *)value = i ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU; return HSA_STATUS_SUCCESS;
  case HSA_AGENT_INFO_WAVEFRONT_SIZE: *(uint32_t *)value = 64; return HSA_STATUS_SUCCESS;
  case HSA_AGENT_INFO_QUEUE_MAX_SIZE: *(uint32_t *)value = i ? 131072 : 0; return HSA_STATUS_SUCCESS;
  case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: *(uint32_t *)value = i ? 104 : 2; return HSA_STATUS_SUCCESS;
  case HSA_AMD_AGENT_INFO_PRODUCT_NAME: memset(value, 0, 64); strcpy(value, i ? "HSA Simulator GPU" : "HSA Simulator CPU"); return HSA_STATUS_SUCCESS;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent, hsa_status_t (*cb)(hsa_isa_t, void *), void *data) {
  ENTER("hsa_agent_iterate_isas");
  int i = agent_index(agent);
  if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (i == 0) return HSA_STATUS_SUCCESS;
  hsa_isa_t isa = {1};
  return cb(isa, data);
}

hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, hsa_isa_info_t attr, void *value) {
  ENTER("hsa_isa_get_info_alt");
  if (isa.handle != 1) return HSA_STATUS_ERROR_INVALID_ISA;
  const char *name = gpu_isa();
  if (attr == HSA_ISA_INFO_NAME_LENGTH) { *(uint32_t *)value = (uint32_t)strlen(name) + 1; return HSA_STATUS_SUCCESS; }
  if (attr == HSA_ISA_INFO_NAME) { memcpy(value, name, strlen(name) + 1); return HSA_STATUS_SUCCESS; }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

/* pool handle: agent * 16 + kind (1 fine-grained, 2 kernarg, 3 coarse-grained) */
hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
    hsa_status_t (*cb)(hsa_amd_memory_pool_t, void *), void *data) {
  ENTER("hsa_amd_agent_iterate_memory_pools");
  int i = agent_index(agent);
  if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  int kinds[2] = {1, 2}, n = i ? 1 : 2;
  if (i) kinds[0] = 3;
  for (int k = 0; k < n; k++) {
    hsa_amd_memory_pool_t p = {(uint64_t)(i + 1) * 16 + kinds[k]};
    hsa_status_t s = cb(p, data);
    if (s != HSA_STATUS_SUCCESS) return s;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool,
    hsa_amd_memory_pool_info_t attr, void *value) {
  ENTER("hsa_amd_memory_pool_get_info");
  int kind = (int)(pool.handle % 16);
  switch ((int)attr) {
  case HSA_AMD_MEMORY_POOL_INFO_SEGMENT: *(hsa_amd_segment_t *)value = HSA_AMD_SEGMENT_GLOBAL; return HSA_STATUS_SUCCESS;
  case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
    *(uint32_t *)value = kind == 3 ? HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
                         : kind == 2 ? (HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
                         : HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
    return HSA_STATUS_SUCCESS;
  case HSA_AMD_MEMORY_POOL_INFO_SIZE: *(size_t *)value = (size_t)64 << 30; return HSA_STATUS_SUCCESS;
  case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: *(bool *)value = true; return HSA_STATUS_SUCCESS;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

static struct alloc_rec { char *p; size_t n; uint64_t pool; } allocs[MAXN];

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size, uint32_t flags, void **ptr) {
  ENTER("hsa_amd_memory_pool_allocate");
  if (!ptr || !size) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  char *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  if (!p) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  pthread_mutex_lock(&mu);
  int i;
  for (i = 0; i < MAXN && allocs[i].p; i++) {}
  if (i == MAXN) { pthread_mutex_unlock(&mu); free(p); return HSA_STATUS_ERROR_OUT_OF_RESOURCES; }
  allocs[i].p = p; allocs[i].n = size; allocs[i].pool = pool.handle;
  pthread_mutex_unlock(&mu);
  *ptr = p;
  return HSA_STATUS_SUCCESS;
}

static int find_alloc(const void *ptr) {
  for (int i = 0; i < MAXN; i++)
    if (allocs[i].p && (const char *)ptr >= allocs[i].p && (const char *)ptr < allocs[i].p + allocs[i].n) return i;
  return -1;
}

hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
  ENTER("hsa_amd_memory_pool_free");
  pthread_mutex_lock(&mu);
  int i = find_alloc(ptr);
  if (i < 0 || allocs[i].p != ptr) { pthread_mutex_unlock(&mu); return HSA_STATUS_ERROR_INVALID_ALLOCATION; }
  allocs[i].p = NULL;
  pthread_mutex_unlock(&mu);
  free(ptr);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_agents_allow_access(uint32_t n, const hsa_agent_t *agents, const uint32_t *flags, const void *ptr) {
  ENTER("hsa_amd_agents_allow_access");
  if (!n || !agents || !ptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  for (uint32_t k = 0; k < n; k++) if (agent_index(agents[k]) < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  pthread_mutex_lock(&mu);
  int i = find_alloc(ptr);
  pthread_mutex_unlock(&mu);
  return i < 0 ? HSA_STATUS_ERROR_INVALID_ARGUMENT : HSA_STATUS_SUCCESS;
}

/* ---- locks ------------------------------------------------------------- */
static struct lock_rec { char *host; size_t n; long count; uint64_t agent_base[NAGENTS]; } locks[MAXN];

long hsa_sim_lock_count(void) {
  long n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXN; i++) if (locks[i].host) n += locks[i].count;
  pthread_mutex_unlock(&mu);
  return n;
}

static hsa_status_t do_lock(void *host, size_t size, hsa_agent_t *agents, int n, void **agent_ptr) {
  if (!host || !size) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  int first = 1; /* ROCr: no agents means all GPUs */
  if (n > 0) {
    for (int k = 0; k < n; k++) if (agent_index(agents[k]) < 1) return HSA_STATUS_ERROR_INVALID_AGENT;
    first = agent_index(agents[0]);
  }
  pthread_mutex_lock(&mu);
  int i, free_i = -1;
  for (i = 0; i < MAXN; i++) {
    if (locks[i].host == host && locks[i].n == size) break;
    if (!locks[i].host && free_i < 0) free_i = i;
  }
  if (i == MAXN) {
    if (free_i < 0) { pthread_mutex_unlock(&mu); return HSA_STATUS_ERROR_OUT_OF_RESOURCES; }
    i = free_i;
    locks[i].host = host; locks[i].n = size; locks[i].count = 0;
    memset(locks[i].agent_base, 0, sizeof locks[i].agent_base);
  }
  locks[i].count++;
  for (int k = 1; k < NAGENTS; k++)
    if (n <= 0 || k == first || (n > 1 && agent_index(agents[1]) == k))
      locks[i].agent_base[k] = (uint64_t)(uintptr_t)host + (uint64_t)k * AGENT_OFFSET;
  if (agent_ptr) *agent_ptr = (void *)(uintptr_t)locks[i].agent_base[first];
  pthread_mutex_unlock(&mu);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_lock(void *host, size_t size, hsa_agent_t *agents, int n, void **agent_ptr) {
  ENTER("hsa_amd_memory_lock");
  return do_lock(host, size, agents, n, agent_ptr);
}

hsa_status_t hsa_amd_memory_lock_to_pool(void *host, size_t size, hsa_agent_t *agents, int n,
    hsa_amd_memory_pool_t pool, uint32_t flags, void **agent_ptr) {
  ENTER("hsa_amd_memory_lock_to_pool");
  return do_lock(host, size, agents, n, agent_ptr);
}

hsa_status_t hsa_amd_memory_unlock(void *host) {
  ENTER("hsa_amd_memory_unlock");
  pthread_mutex_lock(&mu);
  int i;
  for (i = 0; i < MAXN && locks[i].host != host; i++) {}
  if (i == MAXN) { pthread_mutex_unlock(&mu); return HSA_STATUS_ERROR_INVALID_ARGUMENT; }
  if (--locks[i].count == 0) locks[i].host = NULL;
  pthread_mutex_unlock(&mu);
  return HSA_STATUS_SUCCESS;
}

/* agent address -> host address (locked memory); anything else is unchanged */
static char *host_of(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXN; i++)
    for (int k = 1; k < NAGENTS; k++)
      if (locks[i].host && locks[i].agent_base[k] && a >= locks[i].agent_base[k] && a < locks[i].agent_base[k] + locks[i].n) {
        char *h = locks[i].host + (a - locks[i].agent_base[k]);
        pthread_mutex_unlock(&mu);
        return h;
      }
  pthread_mutex_unlock(&mu);
  return (char *)p;
}

hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
    uint32_t *num_accessible, hsa_agent_t **accessible) {
  ENTER("hsa_amd_pointer_info");
  if (!ptr || !info || info->size < sizeof(hsa_amd_pointer_info_t)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint32_t size = info->size;
  memset(info, 0, sizeof *info);
  info->size = size;
  info->type = HSA_EXT_POINTER_TYPE_UNKNOWN;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXN; i++)
    if (locks[i].host && (const char *)ptr >= locks[i].host && (const char *)ptr < locks[i].host + locks[i].n) {
      info->type = HSA_EXT_POINTER_TYPE_LOCKED;
      info->hostBaseAddress = locks[i].host;
      for (int k = 1; k < NAGENTS; k++)
        if (locks[i].agent_base[k]) { info->agentBaseAddress = (void *)(uintptr_t)locks[i].agent_base[k]; break; }
      info->sizeInBytes = locks[i].n;
      info->agentOwner.handle = 1;
      break;
    }
  if (info->type == HSA_EXT_POINTER_TYPE_UNKNOWN) {
    int i = find_alloc(ptr);
    if (i >= 0) {
      info->type = HSA_EXT_POINTER_TYPE_HSA;
      info->hostBaseAddress = info->agentBaseAddress = allocs[i].p;
      info->sizeInBytes = allocs[i].n;
      info->agentOwner.handle = allocs[i].pool / 16;
    }
  }
  pthread_mutex_unlock(&mu);
  if (num_accessible) *num_accessible = 0;
  if (accessible) *accessible = NULL;
  return HSA_STATUS_SUCCESS;
}

/* ---- signals ------------------------------------------------------------- */
struct sim_queue;
typedef struct { hsa_signal_value_t v; pthread_mutex_t m; pthread_cond_t c; struct sim_queue *doorbell_of; } sig_t;
static sig_t *S(hsa_signal_t s) { return (sig_t *)(uintptr_t)s.handle; }

hsa_status_t hsa_signal_create(hsa_signal_value_t initial, uint32_t n, const hsa_agent_t *consumers, hsa_signal_t *out) {
  ENTER("hsa_signal_create");
  if (!out) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  sig_t *s = calloc(1, sizeof *s);
  if (!s) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  s->v = initial;
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->c, NULL);
  out->handle = (uint64_t)(uintptr_t)s;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t sig) {
  ENTER("hsa_signal_destroy");
  if (!sig.handle) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  free(S(sig));
  return HSA_STATUS_SUCCESS;
}

static void sig_add(hsa_signal_t sig, hsa_signal_value_t d, int set) {
  sig_t *s = S(sig);
  pthread_mutex_lock(&s->m);
  s->v = set ? d : s->v + d;
  pthread_cond_broadcast(&s->c);
  pthread_mutex_unlock(&s->m);
}

static void run_queue(struct sim_queue *q);

static void store(hsa_signal_t sig, hsa_signal_value_t v) {
  sig_add(sig, v, 1);
  if (S(sig)->doorbell_of) run_queue(S(sig)->doorbell_of);
}
void hsa_signal_store_relaxed(hsa_signal_t sig, hsa_signal_value_t v) { store(sig, v); }
void hsa_signal_store_screlease(hsa_signal_t sig, hsa_signal_value_t v) { store(sig, v); }
void hsa_signal_subtract_screlease(hsa_signal_t sig, hsa_signal_value_t v) { sig_add(sig, -v, 0); }

hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t sig) {
  sig_t *s = S(sig);
  pthread_mutex_lock(&s->m);
  hsa_signal_value_t v = s->v;
  pthread_mutex_unlock(&s->m);
  return v;
}
hsa_signal_value_t hsa_signal_load_relaxed(hsa_signal_t sig) { return hsa_signal_load_scacquire(sig); }

static int holds(hsa_signal_condition_t c, hsa_signal_value_t v, hsa_signal_value_t x) {
  switch (c) {
  case HSA_SIGNAL_CONDITION_EQ: return v == x;
  case HSA_SIGNAL_CONDITION_NE: return v != x;
  case HSA_SIGNAL_CONDITION_LT: return v < x;
  default: return v >= x;
  }
}

hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t sig, hsa_signal_condition_t cond,
    hsa_signal_value_t compare, uint64_t timeout, hsa_wait_state_t state) {
  sig_t *s = S(sig);
  pthread_mutex_lock(&s->m);
  while (!holds(cond, s->v, compare)) pthread_cond_wait(&s->c, &s->m);
  hsa_signal_value_t v = s->v;
  pthread_mutex_unlock(&s->m);
  return v;
}

/* ---- async copies ---------------------------------------------------------- */
static uint32_t last_copy_deps;
uint32_t hsa_sim_last_copy_deps(void) { return last_copy_deps; }

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent,
    size_t size, uint32_t ndeps, const hsa_signal_t *deps, hsa_signal_t completion) {
  ENTER("hsa_amd_memory_async_copy");
  if (!dst || !src) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (agent_index(dst_agent) < 0 || agent_index(src_agent) < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  last_copy_deps = ndeps;
  for (uint32_t k = 0; k < ndeps; k++)
    hsa_signal_wait_scacquire(deps[k], HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  memmove(host_of(dst), host_of(src), size);
  if (completion.handle) sig_add(completion, -1, 0);
  return HSA_STATUS_SUCCESS;
}

/* ---- code objects, executables, symbols --------------------------------------- */
typedef struct { char name[128]; uint32_t kernarg_size, group_size, private_size; } kernel_t;
typedef struct { char *data; size_t n; } reader_t;
typedef struct { kernel_t k[64]; int nk; int frozen; } exec_t;

hsa_status_t hsa_code_object_reader_create_from_memory(const void *code, size_t size, hsa_code_object_reader_t *r) {
  ENTER("hsa_code_object_reader_create_from_memory");
  if (!code || !size || !r) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  reader_t *rd = malloc(sizeof *rd);
  rd->data = malloc(size);
  memcpy(rd->data, code, size);
  rd->n = size;
  r->handle = (uint64_t)(uintptr_t)rd;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t r) {
  ENTER("hsa_code_object_reader_destroy");
  reader_t *rd = (reader_t *)(uintptr_t)r.handle;
  free(rd->data);
  free(rd);
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
  Elf64_Ehdr *h = (Elf64_Ehdr *)rd->data;
  if (rd->n < sizeof *h || memcmp(h->e_ident, ELFMAG, SELFMAG) || h->e_machine != 224 /* EM_AMDGPU */)
    return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
  Elf64_Shdr *sh = (Elf64_Shdr *)(rd->data + h->e_shoff);
  for (int i = 0; i < h->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
    Elf64_Sym *sym = (Elf64_Sym *)(rd->data + sh[i].sh_offset);
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
      for (int s = 0; s < h->e_shnum; s++) /* the 64-byte kernel descriptor */
        if (sh[s].sh_type == SHT_PROGBITS && sym[j].st_value >= sh[s].sh_addr && sym[j].st_value + 64 <= sh[s].sh_addr + sh[s].sh_size) {
          const char *kd = rd->data + sh[s].sh_offset + (sym[j].st_value - sh[s].sh_addr);
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
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: *(uint64_t *)value = sym.handle; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: *(uint32_t *)value = k->kernarg_size; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: *(uint32_t *)value = k->group_size; return HSA_STATUS_SUCCESS;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: *(uint32_t *)value = k->private_size; return HSA_STATUS_SUCCESS;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

/* ---- queues: dispatch runs the registered host function ----------------------- */
struct sim_queue { hsa_queue_t q; uint64_t write, read; pthread_mutex_t m; };

hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
    void (*cb)(hsa_status_t, hsa_queue_t *, void *), void *data, uint32_t private_size,
    uint32_t group_size, hsa_queue_t **queue) {
  ENTER("hsa_queue_create");
  if (agent_index(agent) < 1) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (!size || (size & (size - 1)) || !queue) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct sim_queue *q = calloc(1, sizeof *q);
  q->q.type = type;
  q->q.size = size;
  q->q.base_address = aligned_alloc(64, (size_t)size * 64);
  for (uint32_t i = 0; i < size; i++)
    ((hsa_kernel_dispatch_packet_t *)q->q.base_address)[i].header = HSA_PACKET_TYPE_INVALID;
  pthread_mutex_init(&q->m, NULL);
  hsa_signal_create(0, 0, NULL, &q->q.doorbell_signal);
  S(q->q.doorbell_signal)->doorbell_of = q;
  *queue = &q->q;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_queue_destroy(hsa_queue_t *queue) {
  ENTER("hsa_queue_destroy");
  struct sim_queue *q = (struct sim_queue *)queue;
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

static void run_queue(struct sim_queue *q) {
  pthread_mutex_lock(&q->m);
  while (q->read < __atomic_load_n(&q->write, __ATOMIC_SEQ_CST)) {
    hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)q->q.base_address + (q->read % q->q.size);
    uint16_t header = __atomic_load_n(&p->header, __ATOMIC_ACQUIRE);
    if ((header & 0xff) == HSA_PACKET_TYPE_INVALID) break; /* not published yet */
    if ((header & 0xff) == HSA_PACKET_TYPE_KERNEL_DISPATCH) {
      kernel_t *k = (kernel_t *)(uintptr_t)p->kernel_object;
      char base[128];
      strncpy(base, k->name, 127);
      base[strlen(base) - 3] = 0; /* drop ".kd" */
      sim_kernel_fn fn = NULL;
      pthread_mutex_lock(&mu);
      for (int i = 0; i < 64 && registered[i].name[0]; i++)
        if (!strcmp(registered[i].name, base)) fn = registered[i].fn;
      pthread_mutex_unlock(&mu);
      uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
      uint16_t wg[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
      if (fn) fn(p->kernarg_address, grid, wg);
      else fprintf(stderr, "hsa_sim: no host function registered for kernel %s\n", base);
    }
    hsa_signal_t done = p->completion_signal;
    __atomic_store_n(&p->header, HSA_PACKET_TYPE_INVALID, __ATOMIC_RELEASE);
    q->read++;
    if (done.handle) sig_add(done, -1, 0);
  }
  pthread_mutex_unlock(&q->m);
}
