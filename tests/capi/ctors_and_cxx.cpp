// Constructors and destructors of declare target globals, and C++ in regions (LLVM
// offload/test/offloading: ctor_dtor, global_constructor, std_complex_arithmetic,
// target-teams-atomic): the device copy of a global is constructed before the first region,
// complex arithmetic and an atomic update inside a region. (`omp critical` does not link for
// sm_90 with LLVM 19's device runtime: left out.)
#include <complex>
#include <cstdio>

struct Counter {
  int v;
  Counter() : v(41) {}
  int next() { return ++v; }
};

#pragma omp declare target
Counter counter;
int hits = 0;
#pragma omp end declare target

int main() {
  int got = 0;
#pragma omp target map(from : got)
  { got = counter.next(); }
  std::printf("constructed on the device: %d\n", got);
  std::complex<double> z(1.0, 2.0), w;
#pragma omp target map(from : w)
  { w = z * z + std::complex<double>(0.5, 0); }
  std::printf("complex %.1f %.1f\n", w.real(), w.imag());
#pragma omp target parallel num_threads(4) map(tofrom : hits)
  {
#pragma omp atomic
    hits += 1;
  }
#pragma omp target update from(hits)
  std::printf("hits at least 1: %d\n", hits >= 1);
  return 0;
}
