// Zero-length array sections (LLVM offload/test/mapping/present/zero_length_array_section.c,
// array_section_implicit_capture.c): an empty section maps nothing and is found inside a
// mapping; a pointer used in a region without a map is looked up, not mapped; an update
// of an empty section moves nothing, and with `present` only checks it lies in a mapping.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[10];
  for (int i = 0; i < 10; i++) a[i] = i;
  int *p = &a[3];
#pragma omp target enter data map(to : a[0:0])
  printf("empty section present: %d\n", omp_target_is_present(a, 0));
#pragma omp target enter data map(to : a[0:10])
#pragma omp target map(present, alloc : p[0:0])
  p[1] = 40;                    // p[0:0] found inside a's mapping: the device copy
  a[5] = 50;
#pragma omp target update from(a[0:0])          // moves nothing (BabelStream's wait)
#pragma omp target update to(present : p[0:0])  // inside a's mapping: nothing to check
#pragma omp target update from(present : a[2:0])
  printf("after empty updates: a[4]=%d a[5]=%d\n", a[4], a[5]);
#pragma omp target enter data map(present, to : p[0:0])   // every construct, present and
#pragma omp target exit data map(present, release : p[0:0])   // empty, inside the mapping
#pragma omp target data map(present, tofrom : p[0:0])
  {
#pragma omp target update to(present : a[9:0])
  }
  printf("still present: %d\n", omp_target_is_present(a, 0));
#pragma omp target exit data map(from : a[0:10])
  printf("a[4]=%d\n", a[4]);
  return 0;
}
