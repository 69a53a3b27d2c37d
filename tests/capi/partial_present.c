// omp_target_is_present and omp_get_mapped_ptr on parts of a mapping, sections mapped
// inside a mapped array, and a section reaching past it (LLVM offload/test/mapping:
// target_data_array_extension_at_exit.c, present/unified_*): inside is present, past
// the end is not, and an inner section shares the device copy.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[100];
  for (int i = 0; i < 100; i++) a[i] = i;
#pragma omp target enter data map(to : a[10:50])
  printf("a+10 %d a+59 %d a+60 %d a %d\n", omp_target_is_present(a + 10, 0),
         omp_target_is_present(a + 59, 0), omp_target_is_present(a + 60, 0),
         omp_target_is_present(a, 0));
  char *p10 = (char *)omp_get_mapped_ptr(a + 10, 0), *p20 = (char *)omp_get_mapped_ptr(a + 20, 0);
  printf("inner pointer offset %ld\n", (long)(p20 - p10));
#pragma omp target map(tofrom : a[20:5])
  for (int i = 20; i < 25; i++) a[i] = -a[i];
  printf("inner section not copied back: a[20]=%d\n", a[20]);
#pragma omp target exit data map(from : a[10:50])
  printf("after exit: a[20]=%d a[24]=%d a[25]=%d\n", a[20], a[24], a[25]);
  return 0;
}
