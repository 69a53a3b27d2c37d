// Threads mapping one array tofrom and adding to it, after LLVM's
// offload/test/mapping/map_back_race.cpp (llvm-project issue 54216): the last unmap keeps
// its entry until the copy back is done, so a region that maps the same array meanwhile
// waits for it and never starts from the stale host copy. Every increment must survive.
// Arguments: bytes of the array (default 4096) and trials (default 100).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  long bytes = argc > 1 ? atol(argv[1]) : 4096;
  int trials = argc > 2 ? atoi(argv[2]) : 100;
  enum { THREADS = 4, REGIONS = 200 };
  long n = bytes / (long)sizeof(float);
  float *a = malloc((size_t)n * sizeof(float));
  if (!a || n < 2)
    return 2;
  int bad = 0;
  for (int trial = 0; trial < trials; trial++) {
    for (long i = 0; i < n; i++)
      a[i] = 0;
#pragma omp parallel for num_threads(THREADS)
    for (int r = 0; r < REGIONS; r++) {
#pragma omp target map(tofrom : a[0:n])
      {
#pragma omp atomic update
        a[0] += 1;
#pragma omp atomic update
        a[n - 1] += 2;
      }
    }
    if (a[0] != REGIONS || a[n - 1] != 2 * REGIONS) {
      if (bad++ < 5)
        printf("trial %d: %g of %d and %g of %d increments\n", trial, a[0], REGIONS,
               a[n - 1], 2 * REGIONS);
    }
  }
  printf("%ld bytes: %d of %d trials lost increments, present %d\n", bytes, bad, trials,
         omp_target_is_present(a, omp_get_default_device()));
  free(a);
  return bad != 0;
}
