// omp_target_memcpy_async and omp_target_memset_async wait for their depobj list: the copy
// of a device buffer runs after the `target nowait` that fills it (depend(out)), and the
// fill after the `target nowait` that writes it, as LLVM 19 orders them (a task with dependences).
#include <omp.h>
#include <stdio.h>

enum { N = 1024 };

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int *d = omp_target_alloc(N * sizeof(int), dev);
  static int out[N], out2[N];
  int token = 0, bad = 0;
  omp_depend_t after_fill, after_copy;
#pragma omp parallel num_threads(2)
#pragma omp single
  {
#pragma omp target nowait depend(out : token) is_device_ptr(d)
    {
      volatile long spin = 0;
      for (long i = 0; i < 200000000L; i++) spin += i;   // long enough to be overtaken
      for (int i = 0; i < N; i++) d[i] = i + 1;
    }
#pragma omp depobj(after_fill) depend(inout : token)
    omp_target_memcpy_async(out, d, N * sizeof(int), 0, 0, host, dev, 1, &after_fill);
#pragma omp taskwait
#pragma omp target nowait depend(out : token) is_device_ptr(d)
    {
      volatile long spin = 0;
      for (long i = 0; i < 200000000L; i++) spin += i;
      for (int i = 0; i < N; i++) d[i] = 7;
    }
#pragma omp depobj(after_copy) depend(inout : token)
    omp_target_memset_async(d, 0, N * sizeof(int), dev, 1, &after_copy);
#pragma omp taskwait
    omp_target_memcpy(out2, d, N * sizeof(int), 0, 0, host, dev);
#pragma omp depobj(after_fill) destroy
#pragma omp depobj(after_copy) destroy
  }
  for (int i = 0; i < N; i++)
    bad += out[i] != i + 1 || out2[i] != 0;
  printf("copied after the fill: %s (out[0]=%d out[%d]=%d), zeroed after the second: %s (%d)\n",
         bad ? "no" : "yes", out[0], N - 1, out[N - 1], out2[5] == 0 ? "yes" : "no", out2[5]);
  omp_target_free(d, dev);
  return bad != 0;
}
