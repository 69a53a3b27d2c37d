// Struct members and pointer members (LLVM offload/test/mapping: ptr_and_obj_motion,
// map_back_race, target_map_for_member_data): MEMBER_OF entries and attached pointers.
#include <stdio.h>

typedef struct { int x; int arr[8]; double *p; int y; } S;

int main(void) {
  double buf[4] = {1, 2, 3, 4};
  S s = {1, {0}, buf, 2};
  for (int i = 0; i < 8; i++) s.arr[i] = i;
#pragma omp target map(tofrom : s.x, s.arr[2:4], s.y)
  {
    s.x += 10;
    s.y += 20;
    for (int i = 2; i < 6; i++) s.arr[i] *= 5;
  }
  printf("x=%d y=%d arr: %d %d %d %d\n", s.x, s.y, s.arr[1], s.arr[2], s.arr[5], s.arr[6]);
#pragma omp target map(to : s) map(tofrom : s.p[0:4])
  for (int i = 0; i < 4; i++) s.p[i] += 0.5;
  printf("p[0]=%.1f p[3]=%.1f pointer kept: %d\n", buf[0], buf[3], s.p == buf);
  return 0;
}
