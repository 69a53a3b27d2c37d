// `requires unified_shared_memory` (LLVM offload/test/mapping/present/
// unified_shared_memory.c, offloading/requires.c): the flag reaches the runtime through the
// entry table; host memory is used in place, so nothing stays mapped.
#include <omp.h>
#include <stdio.h>
#pragma omp requires unified_shared_memory

int main(void) {
  int a[4] = {1, 2, 3, 4};
  int *p = a;
#pragma omp target map(tofrom : a)
  a[0] = 10;
#pragma omp target
  p[1] = 20;
  printf("a %d %d present %d\n", a[0], a[1], omp_target_is_present(a, 0));
  return 0;
}
