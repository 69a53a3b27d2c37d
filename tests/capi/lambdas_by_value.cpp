// Lambdas by value and aligned firstprivates (LLVM offload/test/mapping: lambda_by_value,
// firstprivate_aligned, lambda_mapping): captures by copy travel with the lambda; a
// firstprivate keeps its alignment and its value on the device.
#include <cstdio>

struct alignas(64) Big { double v[8]; };

int main() {
  int n = 5;
  double scale = 2.5;
  auto f = [=](int i) { return i * scale + n; };
  double out[4];
#pragma omp target map(from : out)
  for (int i = 0; i < 4; i++) out[i] = f(i);
  std::printf("%.1f %.1f\n", out[0], out[3]);
  Big b;
  for (int i = 0; i < 8; i++) b.v[i] = i;
  int aligned = 0;
  double sum = 0;
#pragma omp target firstprivate(b) map(from : aligned, sum)
  {
    // sum is map(from:): its device copy starts undefined, so add into a local.
    double s = 0;
    aligned = ((unsigned long)&b % 64) == 0;
    for (int i = 0; i < 8; i++) s += b.v[i];
    sum = s;
  }
  std::printf("aligned %d sum %.0f\n", aligned, sum);
  return 0;
}
