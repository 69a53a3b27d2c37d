// Device pointers stored in mapped data and updated (LLVM offload/test/mapping/
// device_ptr_update.c, implicit_device_ptr.c, array_section_use_device_ptr.c): a device
// address taken with use_device_ptr, kept in a struct, used by a later region.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { int *dp; int n; } Box;

int main(void) {
  int n = 8;
  int *h = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) h[i] = i;
  Box b = {NULL, n};
#pragma omp target enter data map(to : h[0:n])
#pragma omp target data use_device_ptr(h)
  b.dp = h;                               // the device address
#pragma omp target map(to : b)
  for (int i = 0; i < b.n; i++) b.dp[i] *= 7;
#pragma omp target exit data map(from : h[0:n])
  printf("h[1]=%d h[7]=%d device pointer differs from host: %d\n", h[1], h[7],
         b.dp != h);
  int *p = &h[2];
#pragma omp target enter data map(to : h[0:n])
#pragma omp target data use_device_ptr(p)
  {
#pragma omp target is_device_ptr(p)
    p[0] = -2;
  }
#pragma omp target exit data map(from : h[0:n])
  printf("h[2]=%d\n", h[2]);
  free(h);
  return 0;
}
