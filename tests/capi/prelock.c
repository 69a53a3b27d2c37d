// The seed's shape (D139208): memory the user allocated and locked with
// llvm_omp_target_lock_mem is mapped tofrom by later target regions.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device_num);
void llvm_omp_target_unlock_mem(void *ptr, int device_num);

int main(void) {
  const int n = 1 << 16;
  int dev = omp_get_default_device();
  int *a = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) a[i] = i;
  void *locked = llvm_omp_target_lock_mem(a, n * sizeof(int), dev);
  printf("locked: %s\n", locked ? "yes" : "no");
  for (int round = 0; round < 3; round++) {
#pragma omp target map(tofrom : a[0:n]) device(dev)
    for (int i = 0; i < n; i++) a[i] += 2;
  }
  long sum = 0;
  for (int i = 0; i < n; i++) sum += a[i];
  printf("sum %ld (expected %ld)\n", sum, (long)n * (n - 1) / 2 + 6L * n);
  llvm_omp_target_unlock_mem(a, dev);
  free(a);
  printf("PASS\n");
  return 0;
}
