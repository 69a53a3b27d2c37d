// The `present` modifier on absent data stops the program (LLVM offload/test/mapping/
// present/target_present.c, target_data_present.c): what was printed before stays.
#include <stdio.h>

int main(void) {
  int a[4] = {1, 2, 3, 4};
#pragma omp target data map(tofrom : a[0:4])
  {
#pragma omp target map(present, tofrom : a[0:4])
    a[0] += 1;
  }
  printf("present and mapped: a[0]=%d\n", a[0]);
  fflush(stdout);
  int b[4] = {0};
#pragma omp target map(present, tofrom : b[0:4])
  b[0] = 1;
  printf("not reached\n");
  return 0;
}
