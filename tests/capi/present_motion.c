// present on updates and extensions at the end of a run (LLVM offload/test/mapping/present:
// target_update_array_extension, target_data_array_extension, target_exit_data_release):
// what is present moves, absent data with present stops the program with LLVM's message.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[10];
  for (int i = 0; i < 10; i++) a[i] = i;
#pragma omp target enter data map(to : a[2:5])
#pragma omp target update to(present : a[3:2])
  printf("inner update ok\n");
#pragma omp target exit data map(present, release : a[2:5])
  printf("released: %d\n", omp_target_is_present(&a[2], 0));
  fflush(stdout);
#pragma omp target update from(present : a[0:10])
  printf("not reached\n");
  return 0;
}
