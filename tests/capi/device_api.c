// The device-memory API (LLVM offload/test/api: omp_target_memcpy*, omp_target_associate_ptr,
// omp_get_mapped_ptr, omp_target_memset): every value printed is the host's view.
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int dev = 0, host = omp_get_initial_device();
  printf("num devices %d, initial %d\n", omp_get_num_devices(), host);
  int src[16], dst[16];
  for (int i = 0; i < 16; i++) src[i] = i * i;
  int *d = (int *)omp_target_alloc(16 * sizeof(int), dev);
  printf("alloc: %s\n", d ? "ok" : "null");
  printf("memcpy h2d: %d\n", omp_target_memcpy(d, src, 16 * sizeof(int), 0, 0, dev, host));
  memset(dst, 0, sizeof dst);
  printf("memcpy d2h: %d\n",
         omp_target_memcpy(dst, d, 8 * sizeof(int), 0, 4 * sizeof(int), host, dev));
  printf("dst: %d %d %d\n", dst[0], dst[1], dst[7]);
  void *r = omp_target_memset(d, 0, 16 * sizeof(int), dev);
  printf("memset returns ptr: %d\n", r == d);
  omp_target_memcpy(dst, d, 16 * sizeof(int), 0, 0, host, dev);
  printf("after memset: %d %d\n", dst[0], dst[15]);
  // a 2-D sub-block: rows 1..2, columns 1..3 of a 4x4 matrix
  int m[4][4], out[4][4];
  for (int i = 0; i < 16; i++) ((int *)m)[i] = i;
  memset(out, 0, sizeof out);
  size_t vol[2] = {2, 3}, off[2] = {1, 1}, dims[2] = {4, 4}, zero[2] = {0, 0};
  int *dm = (int *)omp_target_alloc(sizeof m, dev);
  printf("rect h2d: %d\n",
         omp_target_memcpy_rect(dm, m, sizeof(int), 2, vol, off, off, dims, dims, dev, host));
  printf("rect d2h: %d\n",
         omp_target_memcpy_rect(out, dm, sizeof(int), 2, vol, zero, off, dims, dims, host, dev));
  printf("out row0: %d %d %d, row1: %d %d %d\n", out[0][0], out[0][1], out[0][2], out[1][0],
         out[1][1], out[1][2]);
  printf("rect dims supported > 2: %d\n",
         omp_target_memcpy_rect(NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, dev, host) > 2);
  // associate a host array with device memory
  int h[16];
  for (int i = 0; i < 16; i++) h[i] = -i;
  printf("associate: %d\n", omp_target_associate_ptr(h, d, sizeof h, 0, dev));
  printf("is present: %d, mapped ptr matches: %d\n", omp_target_is_present(h, dev),
         omp_get_mapped_ptr(h, dev) == d);
#pragma omp target update to(h[0:16]) device(dev)
#pragma omp target map(tofrom : h[0:16]) device(dev)
  for (int i = 0; i < 16; i++) h[i] *= 2;
  printf("h after region (associated, not copied back): %d\n", h[3]);
#pragma omp target update from(h[0:16]) device(dev)
  printf("h after update: %d\n", h[3]);
  printf("disassociate: %d\n", omp_target_disassociate_ptr(h, dev));
  printf("is present: %d\n", omp_target_is_present(h, dev));
  omp_target_free(d, dev);
  omp_target_free(dm, dev);
  printf("done\n");
  return 0;
}
