/* One CUDA operation in C, without Python: make the context current, enqueue a copy or a
 * kernel launch, spin on the stream. The one C unit of "enqueue then spin", shared by the
 * accelerator (accel.c includes it; update.c's on_stream) and the CUDA plugin's one-call
 * helper (plugins/_cuda_fast.py compiles this file followed by plugins/cuda_fast.c).
 * The driver is reached through entry points handed in, so nothing links against it. */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int (*set_ctx_t)(void *);
typedef int (*cu_copy_t)(uintptr_t, uintptr_t, size_t, void *);
typedef int (*query_t)(void *);
typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void *, void **, void **);
typedef int (*cu_memset_t)(uintptr_t, unsigned char, size_t, void *);
#define CU_NOT_READY 600                  /* CUDA_ERROR_NOT_READY */

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A copy enqueued around a launch: copy(dst, src, size) (size 0: none). */
typedef struct {
  cu_copy_t copy;
  uintptr_t dst, src;
  size_t size;
} CuSpan;

/* What one CUDA operation enqueues: a copy or a kernel launch (run without the GIL). */
typedef struct {
  int launch;                      /* 0: copy(dst, src, size), 1: launch */
  cu_copy_t copy;
  uintptr_t dst, src;
  size_t size;
  void *fn;
  unsigned grid, block, shared;
  void **params;
  uintptr_t zero;                  /* a launch: a range set to 0 on the stream first */
  size_t zero_n;                   /* (its bytes; 0: none) */
  CuSpan before, after;            /* a launch: a copy enqueued first, and one after it */
} CuWork;

/* The driver entry points an operation needs. */
typedef struct {
  set_ctx_t set_ctx;
  void *ctx;
  cu_launch_t launch;
  query_t query;
  cu_memset_t memset;              /* cuMemsetD8Async (for CuWork.zero) */
} CuEntries;

/* query(handle) (a stream's or an event's) until it is not CU_NOT_READY, for at most `spin`
 * seconds: its last result. */
static int cuda_spin(query_t query, void *handle, double spin) {
  int rc = query(handle);
  if (rc == CU_NOT_READY) {
    double until = seconds() + spin;
    while ((rc = query(handle)) == CU_NOT_READY && seconds() < until)
      ;
  }
  return rc;
}

static int cuda_span(const CuSpan *s, void *stream) {
  return s->size ? s->copy(s->dst, s->src, s->size, stream) : 0;
}

/* Run `w` on `stream` and spin on the stream for at most `spin` seconds. Returns the first
 * driver error, 0 when done, or CU_NOT_READY when the work outlasts the spin (the caller
 * then polls, so that Ctrl-C is delivered). */
static int cuda_run_spin(const CuEntries *e, const CuWork *w, void *stream, double spin) {
  int rc = e->set_ctx(e->ctx);
  if (rc == 0 && w->launch)
    rc = cuda_span(&w->before, stream);
  if (rc == 0 && w->launch && w->zero_n)
    rc = e->memset ? e->memset(w->zero, 0, w->zero_n, stream) : 1;
  if (rc == 0)
    rc = w->launch ? e->launch(w->fn, w->grid, 1, 1, w->block, 1, 1, w->shared, stream,
                               w->params, NULL)
                   : w->copy(w->dst, w->src, w->size, stream);
  if (rc == 0 && w->launch)
    rc = cuda_span(&w->after, stream);
  return rc == 0 ? cuda_spin(e->query, stream, spin) : rc;
}
