// A C extension of a Python program with OpenMP offloading in it: loaded into the
// Python test process, it shares offload's runtime with the Python API.
#include <omp.h>
#include <stddef.h>

void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device_num);

int is_present(int *a, int dev) { return omp_target_is_present(a, dev); }

// adds one on the device to an array mapped by whoever mapped it (no copy back here)
int add_one_present(int *a, int n, int dev) {
#pragma omp target map(present, alloc : a[0:n]) device(dev)
  for (int i = 0; i < n; i++) a[i] += 1;
  return 0;
}

void map_to(int *a, int n, int dev) {
#pragma omp target enter data map(to : a[0:n]) device(dev)
}

void unmap_from(int *a, int n, int dev) {
#pragma omp target exit data map(from : a[0:n]) device(dev)
}

void *lock(void *p, size_t n, int dev) { return llvm_omp_target_lock_mem(p, n, dev); }
