// Pointers and their pointees mapped together (LLVM offload/test/mapping: map_ptr_and_star_local,
// map_ptr_and_star_global, map_ptr_and_subscript_local): the pointer itself, its pointee by
// subscript and by dereference, local and global pointers.
#include <stdio.h>

int gbuf[8];
int *gp = gbuf;

int main(void) {
  int lbuf[8];
  int *lp = lbuf;
  for (int i = 0; i < 8; i++) { lbuf[i] = i; gbuf[i] = 10 * i; }
#pragma omp target map(tofrom : lp[0:8])
  for (int i = 0; i < 8; i++) lp[i] += 1;
  printf("local subscript: %d %d\n", lbuf[0], lbuf[7]);
#pragma omp target map(tofrom : gp[2:4])
  for (int i = 2; i < 6; i++) gp[i] += 5;
  printf("global subscript: %d %d %d\n", gbuf[1], gbuf[2], gbuf[5]);
#pragma omp target map(tofrom : lp[0:1]) map(to : lp)
  { lp[0] = 42; }
  printf("pointer and pointee: %d pointer kept %d\n", lbuf[0], lp == lbuf);
#pragma omp target data map(tofrom : lp[0:8])
  {
#pragma omp target
    { lp[3] = -3; }
#pragma omp target update from(lp[0:8])
    printf("inside data: %d\n", lbuf[3]);
  }
  return 0;
}
