// firstprivate arrays and aligned scalars (LLVM offload/test/mapping/firstprivate_aligned.cpp,
// offloading/target_firstprivate*): the region works on its own copy.
#include <cstdio>

struct alignas(64) Wide {
  double v[4];
};

int main() {
  int arr[6] = {1, 2, 3, 4, 5, 6};
  Wide w = {{1.5, 2.5, 3.5, 4.5}};
  int out[6] = {0};
  double sum = 0;
#pragma omp target firstprivate(arr, w) map(from : out, sum)
  {
    for (int i = 0; i < 6; i++) { arr[i] *= 10; out[i] = arr[i]; }
    sum = w.v[0] + w.v[3];
    w.v[0] = -1;
  }
  std::printf("out %d %d, host arr unchanged %d %d, sum %.1f, w kept %.1f\n", out[0], out[5],
              arr[0], arr[5], sum, w.v[0]);
  return 0;
}
