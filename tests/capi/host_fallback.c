// Regions on the initial device run on the host (LLVM offload/test/offloading/
// host_as_target.c, if_clause): omp_is_initial_device() says where code ran.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int where[3] = {-1, -1, -1};
  int host = omp_get_initial_device();
#pragma omp target map(from : where[0:1]) device(host)
  where[0] = omp_is_initial_device();
#pragma omp target map(from : where[1:1]) if (0)
  where[1] = omp_is_initial_device();
#pragma omp target map(from : where[2:1]) device(0)
  where[2] = omp_is_initial_device();
  printf("initial device ran on host: %d, if(0): %d, device 0: %d\n", where[0], where[1],
         where[2]);
  int x = 5;
#pragma omp target enter data map(to : x) device(host)
  printf("present on the initial device: %d\n", omp_target_is_present(&x, host));
  return 0;
}
