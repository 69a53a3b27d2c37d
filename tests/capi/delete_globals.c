// Deleting a declare target global keeps it (its count is infinite) and an associated
// pointer's count too (LLVM offload/test/mapping/delete_inf_refcount.c, ompx_hold/
// omp_target_disassociate_ptr.c).
#include <omp.h>
#include <stdio.h>

#pragma omp declare target
int g = 7;
#pragma omp end declare target

int main(void) {
  int dev = 0;
#pragma omp target exit data map(delete : g) device(dev)
  printf("global present after delete: %d\n", omp_target_is_present(&g, dev));
  int h[4] = {1, 2, 3, 4};
  void *d = omp_target_alloc(sizeof h, dev);
  omp_target_associate_ptr(h, d, sizeof h, 0, dev);
#pragma omp target exit data map(delete : h) device(dev)
  printf("associated present after delete: %d\n", omp_target_is_present(h, dev));
  printf("disassociate: %d\n", omp_target_disassociate_ptr(h, dev));
  omp_target_free(d, dev);
  return 0;
}
