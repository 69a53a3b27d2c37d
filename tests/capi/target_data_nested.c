// Nested data regions and a region inside them, with always and release (LLVM offload/
// test/mapping: target_data_array_extension_at_exit.c, ompx_hold/target-data.c,
// present/target_exit_data_release.c).
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[6] = {0, 1, 2, 3, 4, 5};
#pragma omp target data map(to : a)
  {
#pragma omp target data map(tofrom : a)
    {
#pragma omp target map(always, from : a)
      for (int i = 0; i < 6; i++) a[i] = 10 * i;
      printf("inner, always from: a[5]=%d\n", a[5]);
      a[0] = -1;
    }
    printf("after inner (count still 1): a[0]=%d\n", a[0]);
#pragma omp target exit data map(release : a)
    printf("released, present: %d\n", omp_target_is_present(a, 0));
#pragma omp target enter data map(to : a)
  }
  printf("after outer: a[0]=%d present %d\n", a[0], omp_target_is_present(a, 0));
  return 0;
}
