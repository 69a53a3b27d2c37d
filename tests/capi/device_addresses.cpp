// use_device_addr and has_device_addr with references, arrays and scalars (LLVM offload/test/
// mapping: has_device_addr, array_section_use_device_ptr, implicit_device_ptr): the device
// address of mapped data passed back in, and pointers to unmapped data left as they are.
#include <cstdio>
#include <omp.h>

int main() {
  int x = 1, arr[6] = {1, 2, 3, 4, 5, 6};
  int &rx = x;
#pragma omp target data map(tofrom : x, arr)
  {
#pragma omp target data use_device_addr(x, arr)
    {
#pragma omp target has_device_addr(x, arr)
      {
        x += 10;
        arr[5] += 60;
      }
    }
#pragma omp target map(tofrom : rx)
    { rx += 100; }
  }
  std::printf("x=%d arr5=%d\n", x, arr[5]);
  int *p = arr;
#pragma omp target data map(tofrom : arr[1:3]) use_device_ptr(p)
  {
    std::printf("translated: %d\n", p != arr);
  }
  int *q = nullptr;
#pragma omp target is_device_ptr(q)
  { if (q) q[0] = 1; }
  std::printf("null kept\n");
  return 0;
}
