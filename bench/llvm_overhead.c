// The overhead micro-benchmarks of bench/overhead.py as an OpenMP program, built with
// clang-19 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu: bench/overhead.py runs it
// on LLVM's own libomptarget, bench/capi.py on LLVM's and on offload's drop-in library.
// Prints "name seconds-per-operation" lines: the median of 7 batches, the batch size
// grown until a batch takes 20 ms.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void measure(const char *name, void (*op)(void)) {
  long n = 1;
  for (;;) {
    double t0 = now();
    for (long r = 0; r < n; ++r) op();
    if (now() - t0 > 0.02 || n > (1L << 22)) break;
    n *= 4;
  }
  double times[7];
  for (int k = 0; k < 7; ++k) {
    double t0 = now();
    for (long r = 0; r < n; ++r) op();
    times[k] = (now() - t0) / n;
  }
  qsort(times, 7, sizeof times[0], cmp);
  printf("%s %.9e\n", name, times[3]);
}

static int small[1000], big[1000000], second[1000], third[1000];

static void empty_region(void) {
#pragma omp target
  { }
}

static void map_small(void) {          // issue 29's measure: add 1 to each element
#pragma omp target map(tofrom: small[0:1000])
  for (int i = 0; i < 1000; i++) small[i] += 1;
}

static void map_big(void) {
#pragma omp target map(tofrom: big[0:1000000])
  { big[0] += 1; }
}

static void enter_exit(void) {
#pragma omp target enter data map(to: small[0:1000])
#pragma omp target exit data map(from: small[0:1000])
}

static void present_region(void) {
#pragma omp target map(tofrom: small[0:1000])
  { small[0] += 1; }
}

static void pointers_region(void) {   // BabelStream's shape: pointers into mapped data
  int *a = small, *b = second, *c = third;
#pragma omp target
  { c[0] = a[0] + b[0]; }
}

static void update_to(void) {
#pragma omp target update to(small[0:1000])
}

void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device_num);
void llvm_omp_target_unlock_mem(void *ptr, int device_num);

static void lock_unlock(void) {
  llvm_omp_target_lock_mem(small, sizeof small, 0);
  llvm_omp_target_unlock_mem(small, 0);
}

int main(void) {
  measure("empty target region", empty_region);
  measure("target map(tofrom) 1000 ints", map_small);
  measure("target map(tofrom) 1000000 ints", map_big);
  measure("enter+exit 1000 ints", enter_exit);
#pragma omp target enter data map(to: small[0:1000])
  measure("target update to 1000 ints", update_to);
  measure("target on mapped 1000 ints", present_region);
#pragma omp target enter data map(to: second[0:1000], third[0:1000])
  measure("target, 3 pointers into mapped data", pointers_region);
#pragma omp target exit data map(release: small[0:1000], second[0:1000], third[0:1000])
  measure("lock+unlock 4000 bytes", lock_unlock);
  return small[0] == 0;
}
