// Attached pointers keep their values across copies of the struct that holds them (LLVM's
// shadow pointers; LLVM offload/test/mapping: ptr_and_obj_motion, data_member_ref): after
// `update from(s)` the host pointer is still the host buffer, after `update to(s)` the
// device copy still points at the device buffer.
#include <stdio.h>
typedef struct { int x; double *p; } S;
int main(void) {
  double buf[4] = {1, 2, 3, 4};
  S s = {1, buf};
#pragma omp target data map(to : s) map(tofrom : s.p[0:4])
  {
#pragma omp target
    { s.x = 5; s.p[0] = 9; }
#pragma omp target update from(s)
    printf("after update from(s): x=%d pointer kept %d\n", s.x, s.p == buf);
    s.x = 7;
#pragma omp target update to(s)
#pragma omp target
    { s.p[1] = s.x; }
  }
  printf("buf %.0f %.0f pointer kept %d\n", buf[0], buf[1], s.p == buf);
  return 0;
}
