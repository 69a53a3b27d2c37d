// use_device_ptr, use_device_addr and is_device_ptr (LLVM offload/test/mapping:
// use_device_addr/*, is_device_ptr): device addresses handed to the host and back.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int dev = 0;
  int a[32];
  int *p = a;
  for (int i = 0; i < 32; i++) a[i] = i;
#pragma omp target data map(tofrom : a[0:32]) device(dev)
  {
    int *dp = NULL;
#pragma omp target data use_device_ptr(p) device(dev)
    dp = p;
    printf("use_device_ptr is the mapped address: %d\n", dp == omp_get_mapped_ptr(a, dev));
#pragma omp target is_device_ptr(dp) device(dev)
    for (int i = 0; i < 32; i++) dp[i] += 100;
#pragma omp target data use_device_addr(a) device(dev)
    printf("use_device_addr too: %d\n", (void *)&a[0] == omp_get_mapped_ptr(p, dev));
  }
  printf("a[0]=%d a[31]=%d\n", a[0], a[31]);
  return 0;
}
