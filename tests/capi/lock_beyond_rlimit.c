// llvm_omp_target_lock_mem of a buffer larger than RLIMIT_MEMLOCK on a host device: LLVM
// 19's host plugin returns the pointer (its lock does nothing); offload returns it too, the
// memory used unpinned, with one warning; constructs and the unlock then work on it.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
void *llvm_omp_target_lock_mem(void *, size_t, int);
void llvm_omp_target_unlock_mem(void *, int);

int main(void) {
  enum { N = 4 << 20 };                       // 16 MiB of ints
  int *a = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) a[i] = i;
  int dev = omp_get_default_device();
  void *locked = llvm_omp_target_lock_mem(a, N * sizeof(int), dev);
#pragma omp target map(tofrom : a[0:N])
  for (int i = 0; i < N; i++) a[i] += 1;
  llvm_omp_target_unlock_mem(a, dev);
  printf("lock returned the pointer: %d, a[N-1]=%d\n", locked == (void *)a, a[N - 1]);
  free(a);
  return 0;
}
