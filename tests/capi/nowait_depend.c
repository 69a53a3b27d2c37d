// nowait and depend on data constructs and regions (LLVM offload/test/offloading:
// target_nowait_target, target_depend_nowait): the chain runs in dependence order.
#include <omp.h>
#include <stdio.h>

int main(void) {
  enum { N = 1000 };
  int a[N], b[N];
  for (int i = 0; i < N; i++) { a[i] = i; b[i] = 0; }
#pragma omp parallel
#pragma omp single
  {
#pragma omp target enter data map(to : a[0:N]) map(alloc : b[0:N]) depend(out : a, b) nowait
#pragma omp target depend(inout : a) depend(inout : b) nowait
    for (int i = 0; i < N; i++) b[i] = a[i] * 2;
#pragma omp target update from(b[0:N]) depend(inout : b) nowait
#pragma omp task depend(in : b)
    { printf("b[10]=%d b[999]=%d\n", b[10], b[999]); }
#pragma omp target exit data map(delete : a[0:N], b[0:N]) depend(inout : a, b) nowait
#pragma omp taskwait
  }
  printf("present after exit: %d %d\n", omp_target_is_present(a, 0), omp_target_is_present(b, 0));
  return 0;
}
