// Several clauses on one array in one construct (LLVM offload/test/mapping:
// map_ordering_tgt_exit_data_delete_from.c, map_ordering_tgt_data_alloc_from.c): `from`
// copies when the construct drops the last reference, even beside `delete`. (Clause orders
// LLVM 19 gets wrong are checked on offload alone: ordering_beyond_llvm.c.in.)
#include <omp.h>
#include <stdio.h>

int main(void) {
  int z[1] = {333};
#pragma omp target enter data map(to : z)
#pragma omp target map(alloc : z)
  z[0] = 3333;
#pragma omp target exit data map(delete : z) map(from : z)
  printf("exit delete+from: z=%d present=%d\n", z[0], omp_target_is_present(z, 0));
  return 0;
}
