// Device pointers from omp_target_alloc passed to regions in every way (LLVM offload/test/
// mapping: is_device_ptr, has_device_addr; api: omp_target_memcpy, omp_target_associate_ptr):
// is_device_ptr, firstprivate device pointers, associated host memory used by map clauses.
#include <cstdio>
#include <omp.h>

int main() {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int *d = static_cast<int *>(omp_target_alloc(8 * sizeof(int), dev));
#pragma omp target is_device_ptr(d)
  for (int i = 0; i < 8; i++) d[i] = i * i;
  int h[8] = {0};
  omp_target_memcpy(h, d, sizeof h, 0, 0, host, dev);
  std::printf("is_device_ptr: %d %d\n", h[3], h[7]);
  int assoc[8];
  for (int i = 0; i < 8; i++) assoc[i] = -1;
  omp_target_associate_ptr(assoc, d, sizeof assoc, 0, dev);
#pragma omp target map(tofrom : assoc[0:8])
  for (int i = 0; i < 8; i++) assoc[i] += 1;
  std::printf("associated, not copied: %d present %d\n", assoc[0],
              omp_target_is_present(assoc, dev));
#pragma omp target update from(assoc[2:3])
  std::printf("update through the association: %d %d %d\n", assoc[2], assoc[3], assoc[4]);
  omp_target_disassociate_ptr(assoc, dev);
  omp_target_free(d, dev);
  return 0;
}
