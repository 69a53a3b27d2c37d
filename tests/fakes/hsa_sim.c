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
 * Its parts: this file (state, test hooks, agents, ISAs, pools), hsa_sim_memory.c (locks,
 * pointer info, signals, copies) and hsa_sim_code.c (code objects, executables, queues).
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

/* the rest, in this order, as one translation unit */
#include "hsa_sim_memory.c"
#include "hsa_sim_code.c"
