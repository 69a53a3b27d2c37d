/* HSA simulator: a TEST DOUBLE of libhsa-runtime64 for the AMDGPU plugin's tests.
 *
 * Built against the real HSA headers, so every entry point has ROCr's exact
 * signature. It is as strict as ROCr where the plugin can go wrong (see
 * shared/reference/amdgpu-review.md, "What the simulator models differently"):
 *  - pool memory is accessible only to the agents ROCr maps it to (its owner)
 *    until hsa_amd_agents_allow_access; a copy or dispatch touching memory its
 *    agent cannot see is a memory-access fault (counted, the operation fails);
 *  - copies run on their own threads and kernels on a worker per queue, after a
 *    random delay: nothing completes inside the call that started it;
 *  - signal waits honour their timeout and return spuriously now and then;
 *    injected copy errors make the completion signal negative;
 *  - queues check the packet (geometry, reserved fields, the kernarg segment's
 *    visibility, the private segment of kernels with dynamic call stacks) and
 *    report errors through the queue callback, suspending the queue;
 *  - barrier-AND packets; symbol TYPE and DYNAMIC_CALLSTACK queries; the reader
 *    borrows the code object; memory HSA allocated cannot be locked;
 *  - locks behave as ROCm <= 5.6 (one address for every GPU, counted unlocks) or,
 *    with HSA_SIM_SVM=1, as ROCm >= 5.7 (agent address == host address, unlock a
 *    no-op, pointer info UNKNOWN for locked memory).
 * HSA_SIM_NO_P2P=1: the two GPUs can never reach each other's memory.
 * HSA_SIM_GPU_ISA overrides the GPUs' ISA name.
 *
 * Test hooks: hsa_sim_register_kernel, hsa_sim_fail, hsa_sim_calls, hsa_sim_lock_count,
 * hsa_sim_last_copy_deps, hsa_sim_faults, hsa_sim_fail_copies, hsa_sim_fail_dispatch,
 * hsa_sim_set_dynamic_stack, hsa_sim_allow_count, hsa_sim_rect_copies.
 */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static long faults, fail_copies, allow_calls;
static hsa_status_t fail_dispatch;
static char dynamic_stack[64][128];

long hsa_sim_faults(void) { return __atomic_load_n(&faults, __ATOMIC_SEQ_CST); }
long hsa_sim_allow_count(void) { return __atomic_load_n(&allow_calls, __ATOMIC_SEQ_CST); }
void hsa_sim_fail_copies(long n) { __atomic_store_n(&fail_copies, n, __ATOMIC_SEQ_CST); }
void hsa_sim_fail_dispatch(hsa_status_t s) { __atomic_store_n(&fail_dispatch, s, __ATOMIC_SEQ_CST); }
void hsa_sim_set_dynamic_stack(const char *kernel) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < 64; i++) if (!dynamic_stack[i][0]) { strncpy(dynamic_stack[i], kernel, 127); break; }
  pthread_mutex_unlock(&mu);
}
static int env_on(const char *name) { const char *e = getenv(name); return e && *e && *e != '0'; }
static void fault(const char *what, int agent, const void *p) {
  __atomic_fetch_add(&faults, 1, __ATOMIC_SEQ_CST);
  fprintf(stderr, "hsa_sim: memory access fault by agent %d at %p (%s)\n", agent, p, what);
}
static void jitter(void) { /* 0-300 us: completion never coincides with the call */
  static __thread unsigned seed;
  if (!seed) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)time(NULL);
  usleep((useconds_t)(rand_r(&seed) % 300));
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
  switch ((int)status) {
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
  case HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: *str = "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: The AQL packet is malformed."; break;
  case HSA_STATUS_ERROR_EXCEPTION: *str = "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception."; break;
  case HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: *str = "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address."; break;
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
  case HSA_AGENT_INFO_FEATURE: *(hsa_agent_feature_t *)value = i ? HSA_AGENT_FEATURE_KERNEL_DISPATCH : HSA_AGENT_FEATURE_AGENT_DISPATCH; return HSA_STATUS_SUCCESS;
  case HSA_AGENT_INFO_WORKGROUP_MAX_SIZE: *(uint32_t *)value = 1024; return HSA_STATUS_SUCCESS;
  case HSA_AGENT_INFO_GRID_MAX_SIZE: *(uint32_t *)value = UINT32_MAX; return HSA_STATUS_SUCCESS;
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

/* ACCESS of a pool for an agent: its owner by default; system pools may be allowed to
 * GPUs; another GPU's VRAM may be allowed too, unless HSA_SIM_NO_P2P */
static hsa_amd_memory_pool_access_t pool_access(int agent, uint64_t pool) {
  int owner = (int)(pool / 16) - 1;
  if (agent == owner) return HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
  if (owner == 0) return agent ? HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT : HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
  if (agent == 0) return HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
  return env_on("HSA_SIM_NO_P2P") ? HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED : HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
}

hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t pool,
    hsa_amd_agent_memory_pool_info_t attr, void *value) {
  ENTER("hsa_amd_agent_memory_pool_get_info");
  int i = agent_index(agent);
  if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (attr != HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *(hsa_amd_memory_pool_access_t *)value = pool_access(i, pool.handle);
  return HSA_STATUS_SUCCESS;
}

static struct alloc_rec { char *p; size_t n; uint64_t pool; uint32_t access; } allocs[MAXN];

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
  allocs[i].access = 1u << ((int)(pool.handle / 16) - 1); /* its owner only (AllocateRestrict) */
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
  __atomic_fetch_add(&allow_calls, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&mu);
  int i = find_alloc(ptr);
  hsa_status_t st = i < 0 ? HSA_STATUS_ERROR_INVALID_ARGUMENT : HSA_STATUS_SUCCESS;
  for (uint32_t k = 0; i >= 0 && k < n; k++) {
    int a = agent_index(agents[k]);
    if (pool_access(a, allocs[i].pool) == HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED) st = HSA_STATUS_ERROR_INVALID_AGENT;
    else allocs[i].access |= 1u << a;
  }
  pthread_mutex_unlock(&mu);
  return st;
}

/* ---- locks ------------------------------------------------------------- */
/* Legacy thunk (ROCm <= 5.6): one GPU address for every GPU, counted unlocks.
 * SVM thunk (HSA_SIM_SVM=1, ROCm >= 5.7): the host address, unlock a no-op,
 * pointer info UNKNOWN. */
static struct lock_rec { char *host; size_t n; long count; uint64_t agent_base; uint32_t agents; } locks[MAXN];

long hsa_sim_lock_count(void) {
  long n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXN; i++) if (locks[i].host) n += locks[i].count;
  pthread_mutex_unlock(&mu);
  return n;
}

static hsa_status_t do_lock(void *host, size_t size, hsa_agent_t *agents, int n, void **agent_ptr) {
  if (!host || !size) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  uint32_t mask = 0;
  for (int k = 0; k < n; k++) {
    int a = agent_index(agents[k]);
    if (a < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
    if (a > 0) mask |= 1u << a;                 /* CPU agents in the list are ignored */
  }
  int svm = env_on("HSA_SIM_SVM");
  if (!svm || !mask) mask = ((1u << NAGENTS) - 1) & ~1u;   /* legacy, or no list: all GPUs */
  pthread_mutex_lock(&mu);
  if (find_alloc(host) >= 0) {                  /* "Not a userptr when we are expecting one" */
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_ERROR;
  }
  int i, free_i = -1;
  for (i = 0; i < MAXN; i++) {
    if (locks[i].host == host && locks[i].n == size) break;
    if (!locks[i].host && free_i < 0) free_i = i;
  }
  if (i == MAXN) {
    if (free_i < 0) { pthread_mutex_unlock(&mu); return HSA_STATUS_ERROR_OUT_OF_RESOURCES; }
    i = free_i;
    locks[i].host = host; locks[i].n = size; locks[i].count = 0; locks[i].agents = 0;
    locks[i].agent_base = svm ? (uint64_t)(uintptr_t)host : (uint64_t)(uintptr_t)host + AGENT_OFFSET;
  }
  locks[i].count++;
  locks[i].agents |= mask;
  if (agent_ptr) *agent_ptr = (void *)(uintptr_t)locks[i].agent_base;
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
  if (env_on("HSA_SIM_SVM")) return HSA_STATUS_SUCCESS;   /* the SVM thunk: a no-op */
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
    if (locks[i].host && a >= locks[i].agent_base && a < locks[i].agent_base + locks[i].n) {
      char *h = locks[i].host + (a - locks[i].agent_base);
      pthread_mutex_unlock(&mu);
      return h;
    }
  pthread_mutex_unlock(&mu);
  return (char *)p;
}

/* can agent `a` reach [p, p+n)? The CPU reaches everything here (it is all host memory);
 * a GPU reaches pool memory it was allowed and memory locked for it, nothing else */
static int can_access(int a, const void *p, size_t n) {
  if (a == 0) return 1;
  uint64_t x = (uint64_t)(uintptr_t)p;
  int ok = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXN && !ok; i++)
    if (locks[i].host && ((x >= locks[i].agent_base && x + n <= locks[i].agent_base + locks[i].n) ||
                          (x >= (uint64_t)(uintptr_t)locks[i].host && x + n <= (uint64_t)(uintptr_t)locks[i].host + locks[i].n)))
      ok = (locks[i].agents >> a) & 1;
  if (!ok) {
    int i = find_alloc(p);
    ok = i >= 0 && (allocs[i].access >> a) & 1 && (char *)p + n <= allocs[i].p + allocs[i].n;
  }
  pthread_mutex_unlock(&mu);
  return ok;
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
  if (!env_on("HSA_SIM_SVM"))            /* the SVM thunk does not report locked memory */
    for (int i = 0; i < MAXN; i++)
      if (locks[i].host && (const char *)ptr >= locks[i].host && (const char *)ptr < locks[i].host + locks[i].n) {
        info->type = HSA_EXT_POINTER_TYPE_LOCKED;
        info->hostBaseAddress = locks[i].host;
        info->agentBaseAddress = (void *)(uintptr_t)locks[i].agent_base;
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

/* the system clock domain: CLOCK_MONOTONIC nanoseconds (frequency 1 GHz) */
static uint64_t ticks(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- signals ------------------------------------------------------------- */
struct sim_queue;
typedef struct { hsa_signal_value_t v; pthread_mutex_t m; pthread_cond_t c; struct sim_queue *doorbell_of;
                 uint64_t start_ts, end_ts; /* a profiled packet's, system ticks (ns) */ } sig_t;
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

static void ring(struct sim_queue *q);

static void store(hsa_signal_t sig, hsa_signal_value_t v) {
  sig_add(sig, v, 1);
  if (S(sig)->doorbell_of) ring(S(sig)->doorbell_of);
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

/* the simulator's own waits: until the value is <= 0 (a negative one means failure) */
static hsa_signal_value_t wait_done(hsa_signal_t sig) {
  sig_t *s = S(sig);
  pthread_mutex_lock(&s->m);
  while (s->v > 0) pthread_cond_wait(&s->c, &s->m);
  hsa_signal_value_t v = s->v;
  pthread_mutex_unlock(&s->m);
  return v;
}

/* ROCr: the timeout is honoured (here as nanoseconds, at most 2 s), and a wait may return
 * before its condition holds ("spuriously resume"): callers must loop */
hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t sig, hsa_signal_condition_t cond,
    hsa_signal_value_t compare, uint64_t timeout, hsa_wait_state_t state) {
  static long waits;
  sig_t *s = S(sig);
  int spurious = __atomic_add_fetch(&waits, 1, __ATOMIC_SEQ_CST) % 5 == 0;
  uint64_t ns = timeout < 2000000000ull ? timeout : 2000000000ull;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)(ns / 1000000000ull);
  until.tv_nsec += (long)(ns % 1000000000ull);
  if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
  pthread_mutex_lock(&s->m);
  while (!spurious && !holds(cond, s->v, compare))
    if (pthread_cond_timedwait(&s->c, &s->m, &until)) break;
  hsa_signal_value_t v = s->v;
  pthread_mutex_unlock(&s->m);
  return v;
}

/* ---- async copies: each on its own thread, after its dependencies ----------------- */
static uint32_t last_copy_deps;
uint32_t hsa_sim_last_copy_deps(void) { return last_copy_deps; }

/* n bytes, or (rect copies) rows of n bytes dpitch / spitch apart */
typedef struct { void *dst; const void *src; size_t n; int exec; uint32_t ndeps;
                 hsa_signal_t deps[8]; hsa_signal_t done; int fail;
                 size_t rows, dpitch, spitch; } copy_job;

static void *copy_thread(void *arg) {
  copy_job *j = arg;
  int bad = j->fail;
  size_t rows = j->rows ? j->rows : 1;
  size_t dspan = (rows - 1) * j->dpitch + j->n, sspan = (rows - 1) * j->spitch + j->n;
  for (uint32_t k = 0; k < j->ndeps; k++) if (wait_done(j->deps[k]) < 0) bad = 1;
  jitter();
  if (!bad && (!can_access(j->exec, j->dst, dspan) || !can_access(j->exec, j->src, sspan))) {
    fault(can_access(j->exec, j->dst, dspan) ? "copy source" : "copy destination", j->exec,
          can_access(j->exec, j->dst, dspan) ? j->src : j->dst);
    bad = 1;
  }
  if (!bad)
    for (size_t r = 0; r < rows; r++)
      memmove(host_of((char *)j->dst + r * j->dpitch),
              host_of((const char *)j->src + r * j->spitch), j->n);
  if (j->done.handle) {
    if (bad) sig_add(j->done, -1, 1); else sig_add(j->done, -1, 0);
  }
  free(j);
  return NULL;
}

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent,
    size_t size, uint32_t ndeps, const hsa_signal_t *deps, hsa_signal_t completion) {
  ENTER("hsa_amd_memory_async_copy");
  if (!dst || !src || ndeps > 8) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  int d = agent_index(dst_agent), sa = agent_index(src_agent);
  if (d < 0 || sa < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
  last_copy_deps = ndeps;
  copy_job *j = calloc(1, sizeof *j);
  j->dst = dst; j->src = src; j->n = size; j->ndeps = ndeps; j->done = completion;
  j->exec = sa > 0 ? sa : d;                     /* ROCr copies on the (source) GPU */
  for (uint32_t k = 0; k < ndeps; k++) j->deps[k] = deps[k];
  long left = __atomic_load_n(&fail_copies, __ATOMIC_SEQ_CST);
  while (left > 0 && !__atomic_compare_exchange_n(&fail_copies, &left, left - 1, 0,
                                                   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  j->fail = left > 0;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, copy_thread, j);
  pthread_attr_destroy(&attr);
  if (rc) { free(j); return HSA_STATUS_ERROR_OUT_OF_RESOURCES; }
  return HSA_STATUS_SUCCESS;
}

static long rect_copies;
long hsa_sim_rect_copies(void) { return rect_copies; }

/* ROCr's SDMA rect copy: every element 4-byte aligned, offsets and range x in bytes, y in
   rows; both sides reachable by the copy agent (a GPU; CPU agents are refused). */
hsa_status_t hsa_amd_memory_async_copy_rect(const hsa_pitched_ptr_t *dst, const hsa_dim3_t *dst_offset,
    const hsa_pitched_ptr_t *src, const hsa_dim3_t *src_offset, const hsa_dim3_t *range,
    hsa_agent_t copy_agent, hsa_amd_copy_direction_t dir, uint32_t ndeps,
    const hsa_signal_t *deps, hsa_signal_t completion) {
  ENTER("hsa_amd_memory_async_copy_rect");
  if (!dst || !src || !dst_offset || !src_offset || !range || ndeps > 8 || (ndeps && !deps))
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  int a = agent_index(copy_agent);
  if (a < 1) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (dir < hsaHostToHost || dir > hsaDeviceToDevice || range->z != 1 || !range->x || !range->y)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (((uintptr_t)dst->base | (uintptr_t)src->base | dst->pitch | src->pitch | range->x |
       dst_offset->x | src_offset->x) % 4 || dst->pitch < range->x || src->pitch < range->x)
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  copy_job *j = calloc(1, sizeof *j);
  j->dst = (char *)dst->base + dst_offset->y * dst->pitch + dst_offset->x;
  j->src = (const char *)src->base + src_offset->y * src->pitch + src_offset->x;
  j->n = range->x; j->rows = range->y; j->dpitch = dst->pitch; j->spitch = src->pitch;
  j->ndeps = ndeps; j->done = completion; j->exec = a;
  for (uint32_t k = 0; k < ndeps; k++) j->deps[k] = deps[k];
  last_copy_deps = ndeps;
  __atomic_add_fetch(&rect_copies, 1, __ATOMIC_SEQ_CST);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, copy_thread, j);
  pthread_attr_destroy(&attr);
  if (rc) { free(j); return HSA_STATUS_ERROR_OUT_OF_RESOURCES; }
  return HSA_STATUS_SUCCESS;
}

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
