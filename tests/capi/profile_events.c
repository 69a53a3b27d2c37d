// LIBOMPTARGET_PROFILE: a region, then enter / update / exit of the same array; run with
// the profile on under both runtimes, the trace's copies and kernels are counted alike.
#include <stdio.h>

int main(void) {
  int a[1000];
  for (int i = 0; i < 1000; i++) a[i] = i;
#pragma omp target map(tofrom : a)
  for (int i = 0; i < 1000; i++) a[i] += 1;
#pragma omp target enter data map(to : a)
#pragma omp target update from(a)
#pragma omp target exit data map(release : a)
  printf("%d\n", a[999]);
  return 0;
}
