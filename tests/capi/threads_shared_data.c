// Many host threads mapping, updating and unmapping the same array concurrently (LLVM
// offload/test/mapping/map_back_race.cpp, offloading/parallel_offloading_map.cpp): the
// reference count keeps one device copy; the last exit copies back once.
#include <omp.h>
#include <stdio.h>

int main(void) {
  enum { N = 1000, T = 8 };
  static int a[N];
  for (int i = 0; i < N; i++) a[i] = i;
#pragma omp target enter data map(to : a[0:N])
#pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    for (int r = 0; r < 50; r++) {
#pragma omp target enter data map(to : a[0:N])
#pragma omp target map(tofrom : a[0:N])
      a[t] += 0;
#pragma omp target exit data map(from : a[0:N])
    }
  }
#pragma omp target
  for (int i = 0; i < N; i++) a[i] += 1;
#pragma omp target exit data map(from : a[0:N])
  long sum = 0;
  for (int i = 0; i < N; i++) sum += a[i];
  printf("sum %ld present %d\n", sum, omp_target_is_present(a, 0));
  return 0;
}
