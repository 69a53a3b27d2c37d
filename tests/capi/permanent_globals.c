// Declare target globals keep an infinite count (LLVM offload/test/mapping:
// delete_inf_refcount, low_alignment): delete and release never unmap them; data at odd
// addresses maps and copies back exactly.
#include <omp.h>
#include <stdio.h>

#pragma omp declare target
int g[4] = {1, 2, 3, 4};
#pragma omp end declare target

struct __attribute__((packed)) P { char c; int x; short s; };

int main(void) {
#pragma omp target exit data map(delete : g)
  printf("present after delete: %d\n", omp_target_is_present(g, 0));
#pragma omp target exit data map(release : g)
#pragma omp target
  { g[1] = 20; }
#pragma omp target update from(g)
  printf("g[1]=%d\n", g[1]);
  char buf[13] = "abcdefghijkl";
#pragma omp target map(tofrom : buf[3:5])
  { for (int i = 3; i < 8; i++) buf[i] -= 32; }
  printf("%s\n", buf);
  struct P p = {'p', 7, 3};
#pragma omp target map(tofrom : p)
  { p.x += 1; p.s += 1; }
  printf("%c %d %d\n", p.c, p.x, p.s);
  return 0;
}
