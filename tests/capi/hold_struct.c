// ompx_hold on structs and data regions against delete (LLVM offload/test/mapping/ompx_hold:
// struct, target-data, omp_target_disassociate_ptr): a hold reference keeps the mapping
// through delete; members share their struct's counts.
#include <omp.h>
#include <stdio.h>

typedef struct { int i; int j; } S;

int main(void) {
  S s = {1, 2};
  int dev = omp_get_default_device();
#pragma omp target data map(ompx_hold, tofrom : s)
  {
#pragma omp target exit data map(delete : s)
    printf("present after delete: %d\n", omp_target_is_present(&s, dev));
#pragma omp target map(tofrom : s.j)
    { s.i = 10; s.j = 20; }
    printf("inside: %d %d\n", s.i, s.j);
  }
  printf("after: %d %d present %d\n", s.i, s.j, omp_target_is_present(&s, dev));
  int x = 5;
  void *d = omp_target_alloc(sizeof(int), dev);
  omp_target_associate_ptr(&x, d, sizeof(int), 0, dev);
#pragma omp target data map(ompx_hold, to : x)
  printf("disassociate with hold: %d\n", omp_target_disassociate_ptr(&x, dev));
  printf("disassociate after: %d\n", omp_target_disassociate_ptr(&x, dev));
  omp_target_free(d, dev);
  return 0;
}
