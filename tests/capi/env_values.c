#include <omp.h>
#include <stdio.h>
int main(void) {
  int a[4] = {1, 2, 3, 4};
#pragma omp target map(tofrom : a)
  for (int i = 0; i < 4; i++) a[i] += 10;
  printf("%d %d %d %d\n", a[0], a[1], a[2], a[3]);
  return 0;
}
