// The drop-in libomptarget on a GPU (issue 18): 1 GiB enter(to) / exit(from) / target
// map(tofrom), with and without llvm_omp_target_lock_mem, and the cost of an empty
// `target teams` launch whose one 4 KiB array is already mapped. Built for nvptx by
// bench/capi_gpu.py's --build (clang-19); prints "name value" lines (GB/s, or seconds).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device_num);
void llvm_omp_target_unlock_mem(void *ptr, int device_num);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define REPS 5
static double median(double *t) {
  qsort(t, REPS, sizeof *t, cmp);
  return t[REPS / 2];
}

static void transfers(const char *tag, char *a, size_t n) {
  double to[REPS], from[REPS], both[REPS];
  for (int r = 0; r <= REPS; r++) {             // the first round warms up
    double t0 = now();
#pragma omp target enter data map(to : a[0:n])
    double t1 = now();
#pragma omp target exit data map(from : a[0:n])
    double t2 = now();
#pragma omp target map(tofrom : a[0:n])
    { a[0] += 1; }
    double t3 = now();
    if (r) { to[r - 1] = t1 - t0; from[r - 1] = t2 - t1; both[r - 1] = (t3 - t2) / 2; }
  }
  printf("%s enter(to) %.3f\n", tag, n / median(to) / 1e9);
  printf("%s exit(from) %.3f\n", tag, n / median(from) / 1e9);
  printf("%s target map(tofrom) %.3f\n", tag, n / median(both) / 1e9);
}

int main(int argc, char **argv) {
  size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 1024) << 20;
  char *a = aligned_alloc(4096, n);
  memset(a, 1, n);
  transfers("unpinned", a, n);
  llvm_omp_target_lock_mem(a, n, 0);
  transfers("prelocked", a, n);
  llvm_omp_target_unlock_mem(a, 0);
  free(a);
  static int small[1024];
  double t[REPS];
#pragma omp target data map(tofrom : small[0:1024])
  for (int r = 0; r <= REPS; r++) {
    const int k = 2000;
    double t0 = now();
    for (int i = 0; i < k; i++) {
#pragma omp target teams map(tofrom : small[0:1024])
      { }
    }
    if (r) t[r - 1] = (now() - t0) / k;
  }
  printf("empty target teams, 4 KiB mapped (s) %.9f\n", median(t));
  return 0;
}
