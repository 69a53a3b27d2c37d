// printf inside target regions (the device's printf: vprintf on NVIDIA GPUs), in order
// with the host's output.
#include <stdio.h>

int main(void) {
  printf("before\n");
  fflush(stdout);
  int v = 42;
#pragma omp target map(to : v)
  printf("on the device: v=%d\n", v);
  fflush(stdout);
  printf("after\n");
  return 0;
}
