/* __tgt_rtl_init / __tgt_rtl_deinit (the runtime's reference count, as LLVM 19's initRuntime and
   deinitRuntime) and __tgt_register_requires (removed in LLVM 19: its message). */
#include <stdio.h>
#include <stdint.h>
void __tgt_register_requires(int64_t);
void __tgt_rtl_init(void);
void __tgt_rtl_deinit(void);
int main(void) {
  int x = 1;
  __tgt_rtl_init();
  __tgt_register_requires(1);
#pragma omp target map(tofrom: x)
  x += 1;
  __tgt_rtl_deinit();
  printf("x=%d\n", x);
  return 0;
}
