// C++ references as map items and data members that are references (LLVM offload/test/
// mapping/data_member_ref.cpp, has_device_addr.cpp, is_device_ptr.cpp).
#include <cstdio>

struct View {
  int &ref;
  View(int &r) : ref(r) {}
};

int main() {
  int x = 1;
  int &rx = x;
#pragma omp target map(tofrom : rx)
  rx += 10;
  std::printf("reference: x=%d\n", x);
  int y = 5;
  View v(y);
#pragma omp target map(tofrom : v.ref)
  v.ref *= 3;
  std::printf("member reference: y=%d\n", y);
  int arr[4] = {1, 2, 3, 4};
#pragma omp target data map(tofrom : arr) use_device_addr(arr)
  {
#pragma omp target has_device_addr(arr)
    arr[2] = 30;
  }
  std::printf("has_device_addr: %d %d\n", arr[1], arr[2]);
  return 0;
}
