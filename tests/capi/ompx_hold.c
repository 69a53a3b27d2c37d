// The ompx_hold modifier (LLVM offload/test/mapping/ompx_hold/struct.c, target-data.c):
// a held mapping survives exit data (even delete) until its structured region ends.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[4] = {1, 2, 3, 4};
  int dev = 0;
#pragma omp target data map(ompx_hold, tofrom : a[0:4]) device(dev)
  {
#pragma omp target exit data map(delete : a[0:4]) device(dev)
    printf("held after delete: %d\n", omp_target_is_present(a, dev));
#pragma omp target map(tofrom : a[0:4]) device(dev)
    a[1] = 20;
    printf("inside: a[1]=%d\n", a[1]);
  }
  printf("after: a[1]=%d present=%d\n", a[1], omp_target_is_present(a, dev));
  return 0;
}
