// Several host threads mapping overlapping data at once (LLVM offload/test/mapping:
// map_back_race, offloading/parallel_target_teams_reduction): each thread's region maps the
// shared array, updates its own slice, copies back; the totals add up.
#include <stdio.h>

int main(void) {
  int data[64] = {0};
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 16; t++) {
#pragma omp target map(tofrom : data[t * 4:4])
    for (int k = 0; k < 4; k++) data[t * 4 + k] += t + k;
  }
  long sum = 0;
  for (int i = 0; i < 64; i++) sum += data[i];
  int shared = 0;
#pragma omp parallel num_threads(4)
  {
#pragma omp target map(tofrom : shared)
    {
#pragma omp atomic
      shared += 1;
    }
  }
  printf("sum %ld shared at least 1: %d\n", sum, shared >= 1);
  return 0;
}
