// declare target link (LLVM offload/test/offloading/target_link*, ptr_and_obj): the device
// reaches the host variable's mapped copy through its reference pointer.
#include <stdio.h>

int big[64];
#pragma omp declare target link(big)

int main(void) {
  for (int i = 0; i < 64; i++) big[i] = i;
#pragma omp target map(tofrom : big)
  for (int i = 0; i < 64; i++) big[i] += 1000;
  printf("big[0]=%d big[63]=%d\n", big[0], big[63]);
#pragma omp target enter data map(to : big)
#pragma omp target
  big[7] = -7;
#pragma omp target exit data map(from : big)
  printf("big[7]=%d\n", big[7]);
  return 0;
}
