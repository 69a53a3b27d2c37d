// Updates of sections inside a mapped section, always copies and from on release (LLVM
// offload/test/mapping: target_update_array_extension, target_always_*, data_absent_at_exit,
// alloc_fail-like sizes): what moves, and when.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[12];
  for (int i = 0; i < 12; i++) a[i] = i;
#pragma omp target data map(to : a[2:8])
  {
#pragma omp target
    for (int i = 2; i < 10; i++) a[i] *= 100;
#pragma omp target update from(a[4:2])
    printf("partial update: %d %d %d %d\n", a[3], a[4], a[5], a[6]);
    a[8] = -8;
#pragma omp target map(always, to : a[8:1])
    { a[9] = a[8] * 2; }
#pragma omp target update from(a[9:1])
    printf("always to: %d\n", a[9]);
#pragma omp target map(always, from : a[2:1])
    { a[2] = 222; }
    printf("always from inside: %d\n", a[2]);
  }
  printf("after region: %d %d\n", a[2], a[7]);
  int z[4] = {1, 2, 3, 4};
#pragma omp target enter data map(to : z)
#pragma omp target enter data map(to : z)
#pragma omp target
  { z[0] = 10; }
#pragma omp target exit data map(from : z)
  printf("first exit: %d\n", z[0]);
#pragma omp target exit data map(from : z)
  printf("last exit: %d present %d\n", z[0], omp_target_is_present(z, 0));
  return 0;
}
