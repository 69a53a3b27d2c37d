// Kernel regions whose map lists lie on data mapped before them (offload's present_map
// step takes them in one call) beside the ones that must take the general rules (always,
// a pointer into unmapped memory, a section reaching past its mapping's end is not here:
// it aborts). Each prints what the host sees after it; LLVM 19 prints the same.
// tests/capi/test_capi_paths.py counts which path each took; argv[1]: how many threads run
// the regions on shared data (4). Last, one thread runs regions on a mapping while another
// enters and exits it (its count never reaching 0): no increment may be lost.
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1000
#define THREADS 4
#define ROUNDS 200
static int a[N], b[N], c[N], loose[8];
static long slots[THREADS];

static void pointers(int k) {                      // BabelStream's shape: taken
  int *pa = a, *pb = b, *pc = c;
#pragma omp target
  { pc[k] = pa[k] + pb[k]; }
}

static void sections_inside(void) {               // two sections inside their mappings
#pragma omp target map(tofrom: a[10:20], b[0:5]) map(to: c[100:1])
  { a[10] = b[4] + c[100]; }
}

static void with_scalar(int add) {                // a literal beside a pointer: taken
  int *pc = c;
#pragma omp target firstprivate(add)
  { pc[1] += add; }
}

static void held(void) {                          // ompx_hold and present: taken
#pragma omp target map(ompx_hold, tofrom: a[0:N]) map(present, to: b[0:N])
  { a[2] = 7 * b[2]; }
}

static void always(void) {                        // always copies: the general rules
#pragma omp target map(always, tofrom: a[0:N]) map(to: b[0:N])
  { a[3] = b[3] + 1; }
}

static void unmapped_pointer(void) {              // not mapped: the host pointer passes
  int *p = loose;
  int *pa = a;
#pragma omp target
  { pa[4] = (p != 0); }
}

static void *worker(void *arg) {                  // regions on shared mapped data
  long t = (long)arg;
  long *s = slots;
  for (int r = 0; r < ROUNDS; r++) {
    int *pa = a;
#pragma omp target map(tofrom: s[0:THREADS])
    { s[t] += pa[t] + 1; }
  }
  return NULL;
}

static int counter[1];

static void *toggler(void *arg) {                 // references on the same mapping, never 0
  (void)arg;
  for (int r = 0; r < ROUNDS; r++) {
#pragma omp target enter data map(to: counter[0:1])
#pragma omp target exit data map(release: counter[0:1])
  }
  return NULL;
}

static void *bumper(void *arg) {                  // regions on it meanwhile: present_map's
  (void)arg;
  int *c = counter, *pa = a;
  for (int r = 0; r < ROUNDS; r++) {
#pragma omp target
    { c[0] += 1 + pa[0]; }
  }
  return NULL;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : THREADS;   // at most THREADS
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 2 * i;
    c[i] = 0;
  }
#pragma omp target enter data map(to: a[0:N], b[0:N], c[0:N])
  for (int k = 0; k < 5; k++)
    pointers(k);
  sections_inside();
  with_scalar(5);
  held();
  always();
  unmapped_pointer();
#pragma omp target update from(c[0:N])
  printf("c: %d %d %d %d %d\n", c[0], c[1], c[2], c[3], c[4]);
  printf("a after always: %d (host copy %d)\n", a[3], a[2]);
#pragma omp target enter data map(to: slots[0:THREADS])
  pthread_t th[THREADS];
  for (long t = 0; t < threads && t < THREADS; t++)
    pthread_create(&th[t], NULL, worker, (void *)t);
  for (int t = 0; t < threads && t < THREADS; t++)
    pthread_join(th[t], NULL);
#pragma omp target exit data map(from: slots[0:THREADS])
#pragma omp target exit data map(from: a[0:N], b[0:N], c[0:N])
  printf("a: %d %d %d %d\n", a[2], a[3], a[4], a[10]);
  printf("slots: %ld %ld %ld %ld\n", slots[0], slots[1], slots[2], slots[3]);
#pragma omp target enter data map(to: a[0:N], counter[0:1])
  pthread_t pair[2];
  pthread_create(&pair[0], NULL, toggler, NULL);
  pthread_create(&pair[1], NULL, bumper, NULL);
  pthread_join(pair[0], NULL);
  pthread_join(pair[1], NULL);
#pragma omp target exit data map(from: counter[0:1]) map(release: a[0:N])
  printf("counter: %d\n", counter[0]);
  printf("present after: %d\n", omp_target_is_present(a, omp_get_default_device()));
  return 0;
}
