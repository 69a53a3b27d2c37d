// A pointer to a struct and its members (LLVM offload/test/mapping:
// map_structptr_and_member_local, map_structptr_and_member_global, padding_not_mapped,
// multiple_deletes_within_one_struct): members through the pointer, padding left alone,
// several members deleted by one exit data.
#include <omp.h>
#include <stdio.h>

typedef struct { char c; double d; int a[4]; int b[4]; } T;
T gt = {'g', 1.5, {1, 2, 3, 4}, {5, 6, 7, 8}};

int main(void) {
  T lt = {'l', 2.5, {10, 20, 30, 40}, {50, 60, 70, 80}};
  T *ps = &lt;
  T *pg = &gt;
#pragma omp target map(tofrom : ps->d, ps->a[1:2])
  { ps->d += 1; ps->a[1] += 1; ps->a[2] += 2; }
  printf("local via pointer: %.1f %d %d %d\n", lt.d, lt.a[0], lt.a[1], lt.a[2]);
#pragma omp target map(tofrom : pg->b[0:4]) map(to : pg->c)
  { for (int i = 0; i < 4; i++) pg->b[i] *= 2; }
  printf("global via pointer: %c %d %d\n", gt.c, gt.b[0], gt.b[3]);
#pragma omp target enter data map(to : lt.a, lt.b)
#pragma omp target
  { lt.a[0] = -1; lt.b[3] = -8; }
#pragma omp target exit data map(from : lt.a) map(delete : lt.b)
  printf("after exit: %d %d present %d\n", lt.a[0], lt.b[3],
         omp_target_is_present(&lt.b, 0));
  return 0;
}
