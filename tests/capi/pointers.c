// Pointers as map bases (LLVM offload/test/mapping: ptr_and_obj_motion.c,
// target_implicit_partial_map.c, pr38704.c): a heap array mapped through a pointer
// variable, the pointer used unmapped inside the region (implicit zero-length map), and
// a struct of pointers mapped with its pointees.
#include <stdio.h>
#include <stdlib.h>

typedef struct { double *x; double *y; int n; } Pts;

int main(void) {
  int n = 32;
  int *p = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) p[i] = i;
#pragma omp target enter data map(to : p[0:n])
#pragma omp target                      // p: implicitly mapped, zero-length pointer
  for (int i = 0; i < n; i++) p[i] *= 3;
#pragma omp target exit data map(from : p[0:n])
  printf("p[5]=%d p[31]=%d\n", p[5], p[31]);

  double xs[4] = {1, 2, 3, 4}, ys[4] = {0};
  Pts s = {xs, ys, 4};
#pragma omp target map(to : s, s.x[0:4]) map(tofrom : s.y[0:4])
  for (int i = 0; i < s.n; i++) s.y[i] = s.x[i] * s.x[i];
  printf("ys %.0f %.0f %.0f %.0f kept %d %d\n", ys[0], ys[1], ys[2], ys[3], s.x == xs,
         s.y == ys);
  free(p);
  return 0;
}
