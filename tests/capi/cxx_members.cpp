// C++: a class mapping its own members through `this`, a lambda capturing by reference
// and a nested user-defined mapper (LLVM offload/test/mapping: lambda_mapping.cpp,
// declare_mapper_nested_mappers.cpp, map_this_member*.cpp).
#include <cstdio>

struct Vec {
  int n;
  double *d;
};
#pragma omp declare mapper(Vec v) map(v, v.d[0:v.n])

struct Pair {
  Vec a;
  Vec b;
};
#pragma omp declare mapper(Pair p) map(p.a, p.b)

class Acc {
public:
  int count = 0;
  double data[8];
  void scale(double f) {
#pragma omp target map(tofrom : this->data[0:8], this->count)
    {
      for (int i = 0; i < 8; i++) data[i] *= f;
      count += 1;
    }
  }
};

int main() {
  Acc acc;
  for (int i = 0; i < 8; i++) acc.data[i] = i;
  acc.scale(2.0);
  acc.scale(3.0);
  std::printf("count %d data[7] %.1f\n", acc.count, acc.data[7]);

  double xa[4] = {1, 2, 3, 4}, xb[2] = {10, 20};
  Pair p{{4, xa}, {2, xb}};
#pragma omp target map(tofrom : p)
  {
    for (int i = 0; i < p.a.n; i++) p.a.d[i] += 1;
    for (int i = 0; i < p.b.n; i++) p.b.d[i] *= -1;
  }
  std::printf("xa %.0f %.0f xb %.0f %.0f ptrs kept %d\n", xa[0], xa[3], xb[0], xb[1],
              p.a.d == xa && p.b.d == xb);

  int sum = 0;
  int v[16];
  for (int i = 0; i < 16; i++) v[i] = i;
  auto body = [&]() {
    for (int i = 0; i < 16; i++) sum += v[i];
  };
#pragma omp target map(tofrom : sum) map(to : v[0:16])
  body();
  std::printf("lambda sum %d\n", sum);
  return 0;
}
