// Reference counts across data constructs (LLVM offload/test/mapping: data_absent_at_exit,
// target_data_array_extension_at_exit, present_update_*): to copies when an entry is
// made, from copies when the last reference goes, always/update in between.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[8], b[4];
  int dev = 0;
  for (int i = 0; i < 8; i++) a[i] = i;
  for (int i = 0; i < 4; i++) b[i] = 100 + i;
#pragma omp target enter data map(to : a[0:8]) device(dev)
  printf("present after enter: %d\n", omp_target_is_present(a, dev));
#pragma omp target data map(tofrom : a[0:8]) device(dev)
  {
#pragma omp target map(tofrom : a[0:8]) device(dev)
    for (int i = 0; i < 8; i++) a[i] *= 10;
    printf("host copy inside data (not copied back yet): a[3]=%d\n", a[3]);
  }
  printf("after data region (count still 1): a[3]=%d\n", a[3]);
#pragma omp target update from(a[0:8]) device(dev)
  printf("after update from: a[3]=%d\n", a[3]);
  a[5] = -1;
#pragma omp target update to(a[5:1]) device(dev)
#pragma omp target enter data map(to : a[0:8]) device(dev)
#pragma omp target exit data map(from : a[0:8]) device(dev)
  printf("present after one exit: %d\n", omp_target_is_present(a, dev));
#pragma omp target map(always, tofrom : b[0:4]) device(dev)
  for (int i = 0; i < 4; i++) b[i] += 1;
  printf("b: %d %d %d %d\n", b[0], b[1], b[2], b[3]);
#pragma omp target exit data map(from : a[0:8]) device(dev)
  printf("present after last exit: %d, a[5]=%d a[7]=%d\n", omp_target_is_present(a, dev), a[5],
         a[7]);
#pragma omp target enter data map(to : b[0:4]) device(dev)
#pragma omp target exit data map(delete : b[0:4]) device(dev)
  printf("b present after delete: %d\n", omp_target_is_present(b, dev));
  return 0;
}
