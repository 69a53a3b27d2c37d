// declare target globals (LLVM offload/test/offloading/target_update_global*): the
// device has its own copy, moved by update.
#include <omp.h>
#include <stdio.h>

#pragma omp declare target
int counter = 5;
double table[4] = {1, 2, 3, 4};
#pragma omp end declare target

int main(void) {
  int dev = 0;
  printf("present: %d\n", omp_target_is_present(&counter, dev));
#pragma omp target device(dev)
  {
    counter += 10;
    for (int i = 0; i < 4; i++) table[i] *= 2;
  }
  printf("host after region: counter=%d table[3]=%.1f\n", counter, table[3]);
#pragma omp target update from(counter, table) device(dev)
  printf("host after update: counter=%d table[3]=%.1f\n", counter, table[3]);
  counter = 100;
#pragma omp target update to(counter) device(dev)
  int seen = 0;
#pragma omp target map(from : seen) device(dev)
  seen = counter + 1;
  printf("device saw %d\n", seen);
  return 0;
}
