// Mappers that use mappers, and default mappers of nested structs (LLVM offload/test/mapping:
// declare_mapper_nested_mappers, declare_mapper_nested_default_mappers,
// declare_mapper_target_update): only what the mappers name moves, both ways.
#include <cstdio>

struct Inner { int n; int *data; int skip; };
struct Outer { double w; Inner in; int tail; };

#pragma omp declare mapper(Inner i) map(i.n, i.data[0:i.n])
#pragma omp declare mapper(Outer o) map(o.w, o.in)

int main() {
  int buf[4] = {1, 2, 3, 4};
  Outer o = {0.5, {4, buf, 7}, 9};
#pragma omp target map(tofrom : o)
  {
    o.w *= 2;
    for (int i = 0; i < o.in.n; i++) o.in.data[i] *= 10;
  }
  std::printf("w=%.1f data=%d %d skip=%d tail=%d pointer kept %d\n", o.w, buf[0], buf[3],
              o.in.skip, o.tail, o.in.data == buf);
#pragma omp target enter data map(to : o)
  buf[1] = -2;
#pragma omp target update to(o)
#pragma omp target
  { o.in.data[1] += 1; }
#pragma omp target update from(o)
  std::printf("after updates: %d pointer kept %d\n", buf[1], o.in.data == buf);
#pragma omp target exit data map(release : o)
  return 0;
}
