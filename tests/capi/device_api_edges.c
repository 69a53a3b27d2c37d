// The device memory API at its edges (LLVM offload/test/api: omp_target_memcpy_rect,
// omp_get_mapped_ptr, omp_target_is_accessible, omp_target_memcpy_async, omp_host_pinned_memory
// and llvm_omp_target_alloc_*): rectangles, mapped pointers of sections, async copies with
// dependences, pinned and shared allocations.
#include <omp.h>
#include <stdio.h>

extern void *llvm_omp_target_alloc_host(size_t, int);
extern void *llvm_omp_target_alloc_shared(size_t, int);
extern void llvm_omp_target_free_host(void *, int);
extern void llvm_omp_target_free_shared(void *, int);

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int src[4][5], dst[4][5] = {{0}};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) src[i][j] = 10 * i + j;
  size_t vol[2] = {2, 3}, doff[2] = {1, 1}, soff[2] = {2, 2}, ddim[2] = {4, 5}, sdim[2] = {4, 5};
  int *d = omp_target_alloc(sizeof src, dev);
  int rc1 = omp_target_memcpy_rect(d, src, sizeof(int), 2, vol, doff, soff, ddim, sdim, dev, host);
  int rc2 = omp_target_memcpy_rect(dst, d, sizeof(int), 2, vol, doff, doff, ddim, sdim, host, dev);
  printf("rect %d %d: %d %d %d %d\n", rc1, rc2, dst[1][1], dst[1][3], dst[2][1], dst[0][0]);
  int a[10];
#pragma omp target enter data map(alloc : a[2:6])
  printf("mapped ptr of a[4] is offset: %d\n",
         (char *)omp_get_mapped_ptr(&a[4], dev) - (char *)omp_get_mapped_ptr(&a[2], dev));
  printf("mapped ptr of a[0]: %d\n", omp_get_mapped_ptr(&a[0], dev) == NULL);
#pragma omp target exit data map(delete : a[2:6])
  int *h = llvm_omp_target_alloc_host(16, dev);
  int *s = llvm_omp_target_alloc_shared(16, dev);
  h[0] = 3; s[0] = 4;
  int r[2];
  omp_target_memcpy(r, h, 4, 0, 0, host, host);
  omp_target_memcpy(r + 1, s, 4, 0, 0, host, host);
  printf("host/shared: %d %d\n", r[0], r[1]);
  llvm_omp_target_free_host(h, dev);
  llvm_omp_target_free_shared(s, dev);
  int v = 7, w = 0;
  int *dv = omp_target_alloc(sizeof v, dev);
  int rc3 = omp_target_memcpy_async(dv, &v, sizeof v, 0, 0, dev, host, 0, NULL);
#pragma omp taskwait
  int rc4 = omp_target_memcpy(&w, dv, sizeof v, 0, 0, host, dev);
  printf("async %d %d: %d\n", rc3, rc4, w);
  omp_target_free(dv, dev);
  omp_target_free(d, dev);
  return 0;
}
