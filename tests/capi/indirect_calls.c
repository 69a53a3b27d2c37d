// Indirect calls through host function pointers (LLVM offload/test/offloading/
// indirect_fp_mapping.c): `declare target indirect` functions called on the device by
// the host address the program holds.
#include <stdio.h>

#pragma omp begin declare target indirect
int twice(int x) { return 2 * x; }
int thrice(int x) { return 3 * x; }
#pragma omp end declare target

int main(void) {
  int (*fns[2])(int) = {twice, thrice};
  int r[2];
  for (int i = 0; i < 2; i++) {
    int (*f)(int) = fns[i];
#pragma omp target map(from : r[i:1])
    r[i] = f(7);
  }
  printf("twice(7)=%d thrice(7)=%d\n", r[0], r[1]);
  return 0;
}
