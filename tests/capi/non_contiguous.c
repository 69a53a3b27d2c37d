// Strided (non-contiguous) target update of array sections (LLVM offload/test/offloading/
// non_contiguous_update.cpp, strided_update*.c): only the elements of the section move.
// Strided dimensions start at 0 here: with clang 19 and LLVM 19 a strided dimension's lower
// bound arrives multiplied by its stride (m[0:2:2][1:3:2] moves columns 2, 4 and 6 under
// LLVM), which no runtime can undo from the records it is given; offload reads the
// records as LLVM does. (a[1:8:3] reaches the runtime as the contiguous a[1:8].)
#include <stdio.h>

int main(void) {
  double a[24], m[4][6];
  for (int i = 0; i < 24; i++) a[i] = i;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 6; j++) m[i][j] = 10 * i + j;
#pragma omp target enter data map(to : a[0:24], m[0:4][0:6])
#pragma omp target
  {
    for (int i = 0; i < 24; i++) a[i] = -a[i];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 6; j++) m[i][j] = -m[i][j];
  }
#pragma omp target update from(a[1:8:3])
#pragma omp target update from(m[0:2:2][0:3:2])
  for (int i = 0; i < 24; i++) printf("%g ", a[i]);
  printf("\n");
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 6; j++) printf("%g ", m[i][j]);
    printf("\n");
  }
  a[0] = 100;
  a[2] = 102;
#pragma omp target update to(a[0:2:2])
#pragma omp target exit data map(from : a[0:24]) map(delete : m[0:4][0:6])
  printf("a[0]=%g a[1]=%g a[2]=%g a[4]=%g\n", a[0], a[1], a[2], a[4]);
  return 0;
}
