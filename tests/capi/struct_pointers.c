// Structs reached through pointers and their members (LLVM offload/test/mapping:
// map_structptr_and_member_local.c, map_ptr_and_star_local.c, ptr_and_obj_motion.c): a
// pointer to a struct mapped with the struct, a member array updated through it.
#include <stdio.h>
#include <stdlib.h>

typedef struct { int n; int vals[8]; } Rec;

int main(void) {
  Rec *r = malloc(sizeof(Rec));
  r->n = 8;
  for (int i = 0; i < 8; i++) r->vals[i] = i;
#pragma omp target enter data map(to : r[0:1])
#pragma omp target map(alloc : r[0:1])
  for (int i = 0; i < r->n; i++) r->vals[i] += 100;
#pragma omp target update from(r->vals[2:3])
  printf("vals %d %d %d %d %d\n", r->vals[1], r->vals[2], r->vals[4], r->vals[5], r->n);
#pragma omp target exit data map(from : r[0:1])
  printf("after exit %d %d\n", r->vals[0], r->vals[7]);
  int x = 3;
  int *px = &x;
#pragma omp target map(tofrom : px[0:1])
  *px *= 11;
  printf("x=%d\n", x);
  free(r);
  return 0;
}
