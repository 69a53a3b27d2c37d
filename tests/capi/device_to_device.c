// omp_target_memcpy between two devices and omp_target_memcpy_rect from device to
// device (LLVM offload/test/api: omp_device_memcpy*, omp_target_memcpy_async2).
#include <omp.h>
#include <stdio.h>

int main(void) {
  int host = omp_get_initial_device(), n = omp_get_num_devices();
  int src[8], dst[8] = {0};
  for (int i = 0; i < 8; i++) src[i] = 100 + i;
  int d0 = 0, d1 = n > 1 ? 1 : 0;
  int *a = omp_target_alloc(sizeof src, d0), *b = omp_target_alloc(sizeof src, d1);
  omp_target_memcpy(a, src, sizeof src, 0, 0, d0, host);
  printf("d2d: %d\n", omp_target_memcpy(b, a, sizeof src, 0, 0, d1, d0));
  omp_target_memcpy(dst, b, sizeof dst, 0, 0, host, d1);
  printf("dst %d %d\n", dst[0], dst[7]);
  size_t vol[1] = {4}, off_src[1] = {2}, off_dst[1] = {0}, dims[1] = {8};
  printf("rect d2d: %d\n", omp_target_memcpy_rect(b, a, sizeof(int), 1, vol, off_dst, off_src,
                                                   dims, dims, d1, d0));
  omp_target_memcpy(dst, b, sizeof dst, 0, 0, host, d1);
  printf("dst %d %d %d\n", dst[0], dst[3], dst[4]);
  omp_target_free(a, d0);
  omp_target_free(b, d1);
  return 0;
}
