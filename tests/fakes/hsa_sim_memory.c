/* Part of the HSA simulator (hsa_sim.c includes it): locks, pointer info, signals and
 * asynchronous copies. A TEST DOUBLE of libhsa-runtime64; see hsa_sim.c. */

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

