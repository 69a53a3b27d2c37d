// Structs inside structs with pointer members reached through them (LLVM offload/test/mapping:
// pr38704, chained_containing_structs_1): members of members and the pointee of a member of a
// member. (Two pointer levels, pn->pv->vals[0:2], crash under LLVM 19 with clang 19: left out.)
#include <stdio.h>

typedef struct { int len; double *vals; } Vec;
typedef struct { int id; Vec v; int tail; } Node;

int main(void) {
  double a[3] = {1, 2, 3};
  Node n = {7, {3, a}, 9};
#pragma omp target map(tofrom : n.id, n.v.vals[0:3]) map(to : n.v.len)
  {
    n.id += 1;
    for (int i = 0; i < n.v.len; i++) n.v.vals[i] += 0.5;
  }
  printf("id=%d a=%.1f %.1f %.1f kept %d\n", n.id, a[0], a[1], a[2], n.v.vals == a);
  return 0;
}
