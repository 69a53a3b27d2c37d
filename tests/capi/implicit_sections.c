// Implicit captures of arrays mapped by an enclosing construct, as sections and whole
// (LLVM offload/test/mapping: array_section_implicit_capture, duplicate_mappings_1,
// target_map_for_member_data): the region finds the mapping, counts it, copies nothing.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[16], b[16];
  for (int i = 0; i < 16; i++) { a[i] = i; b[i] = -i; }
#pragma omp target enter data map(to : a[4:8])
#pragma omp target
  { a[5] = 500; }
  printf("host a[5] before update: %d\n", a[5]);
#pragma omp target update from(a[4:8])
  printf("after update: %d\n", a[5]);
#pragma omp target map(tofrom : b[0:16]) map(to : b[0:4])
  { b[1] = 100; b[15] = 150; }
  printf("b: %d %d\n", b[1], b[15]);
#pragma omp target data map(tofrom : b[2:10])
  {
#pragma omp target map(tofrom : b[3:2])
    { b[3] = 33; b[4] = 44; }
    printf("inside: %d %d\n", b[3], b[4]);
  }
  printf("outside: %d %d\n", b[3], b[4]);
#pragma omp target exit data map(delete : a[4:8])
  printf("present: %d\n", omp_target_is_present(&a[4], 0));
  return 0;
}
