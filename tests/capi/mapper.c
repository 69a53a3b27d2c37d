// A user-defined mapper (LLVM offload/test/mapping/declare_mapper_*): the struct and
// the array its pointer member points to travel together.
#include <stdio.h>
#include <stdlib.h>

typedef struct { int n; double *data; } vec;
#pragma omp declare mapper(vec v) map(v, v.data[0:v.n])

int main(void) {
  vec v;
  v.n = 16;
  v.data = malloc(v.n * sizeof(double));
  for (int i = 0; i < v.n; i++) v.data[i] = i;
  double *host_ptr = v.data;
#pragma omp target map(tofrom : v)
  for (int i = 0; i < v.n; i++) v.data[i] *= 3;
  printf("data[5]=%.1f data[15]=%.1f pointer kept: %d\n", v.data[5], v.data[15],
         v.data == host_ptr);
  free(v.data);
  return 0;
}
