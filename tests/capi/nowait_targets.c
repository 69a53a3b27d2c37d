// Many target nowait regions from one task generator, then taskwait (LLVM
// offload/test/offloading/target_nowait_target.cpp, bug49334): every region runs once.
#include <omp.h>
#include <stdio.h>

int main(void) {
  enum { R = 16, N = 256 };
  static int a[R][N];
#pragma omp parallel
#pragma omp single
  for (int r = 0; r < R; r++) {
#pragma omp target nowait map(tofrom : a[r][0:N]) device(r % omp_get_num_devices())
    for (int i = 0; i < N; i++) a[r][i] = r * 1000 + i;
  }
  long sum = 0;
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++) sum += a[r][i];
  printf("sum %ld\n", sum);
  return 0;
}
