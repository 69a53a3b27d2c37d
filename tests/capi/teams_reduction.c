// teams distribute parallel for with a reduction and firstprivate scalars (LLVM
// offload/test/offloading/parallel_target_teams_reduction*.cpp, target_teams_reduction).
#include <stdio.h>

int main(void) {
  enum { N = 100000 };
  static double x[N];
  for (int i = 0; i < N; i++) x[i] = i * 0.5;
  double sum = 0, scale = 2.0;
  long count = 0;
#pragma omp target teams distribute parallel for map(to : x[0:N]) reduction(+ : sum, count) \
    firstprivate(scale)
  for (int i = 0; i < N; i++) {
    sum += x[i] * scale;
    count += 1;
  }
  printf("sum %.1f count %ld\n", sum, count);
  return 0;
}
