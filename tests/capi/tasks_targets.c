// Target regions inside tasks, nowait regions with depend chains and a taskgroup
// (LLVM offload/test/offloading: target_nowait_target, target_depend_nowait, taskloop
// offload, bug49021): every region runs once, in the order the dependences give.
#include <stdio.h>

int main(void) {
  int x = 1, y = 0, z[8] = {0};
#pragma omp parallel
#pragma omp single
  {
#pragma omp target map(tofrom : x) depend(out : x) nowait
    x *= 3;
#pragma omp target map(tofrom : x, y) depend(in : x) depend(out : y) nowait
    y = x + 1;
#pragma omp taskgroup
    {
      for (int t = 0; t < 8; t++) {
#pragma omp task firstprivate(t) shared(z)
        {
#pragma omp target map(tofrom : z[t:1])
          z[t] = t * t;
        }
      }
    }
#pragma omp taskwait
  }
  int s = 0;
  for (int t = 0; t < 8; t++) s += z[t];
  printf("x=%d y=%d sum=%d\n", x, y, s);
  return 0;
}
