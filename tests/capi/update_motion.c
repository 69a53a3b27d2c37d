// target update of absent, partly present and array-section data (LLVM offload/test/
// mapping/target_update_array_extension.c, present/target_update.c): absent data is
// skipped; sections inside a mapping move alone.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[10], b[4] = {0};
  for (int i = 0; i < 10; i++) a[i] = i;
#pragma omp target update to(b[0:4])
  printf("absent update is a no-op: %d\n", omp_target_is_present(b, 0));
#pragma omp target enter data map(to : a[0:10])
#pragma omp target
  for (int i = 0; i < 10; i++) a[i] = 100 + i;
#pragma omp target update from(a[2:3])
  printf("a: %d %d %d %d %d\n", a[1], a[2], a[4], a[5], a[9]);
  a[9] = -9;
#pragma omp target update to(a[9:1])
#pragma omp target exit data map(from : a[0:10])
  printf("a[8]=%d a[9]=%d\n", a[8], a[9]);
  return 0;
}
