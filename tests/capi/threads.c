// Several host threads offloading at once, each to its own device and array.
#include <omp.h>
#include <stdio.h>

int main(void) {
  enum { T = 8, N = 4096 };
  static int a[T][N];
  int ndev = omp_get_num_devices();
#pragma omp parallel for num_threads(T)
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < N; i++) a[t][i] = t;
    for (int r = 0; r < 20; r++) {
#pragma omp target map(tofrom : a[t][0:N]) device(t % ndev)
      for (int i = 0; i < N; i++) a[t][i] += 1;
    }
  }
  long sum = 0;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < N; i++) sum += a[t][i];
  printf("sum %ld\n", sum);
  return 0;
}
