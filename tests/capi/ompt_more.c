/* OMPT (EMI): the callbacks for a nowait target, a struct with its pointee (the attached
   pointer's copy), a declare target global, entries already present (always, alloc,
   update of a section), use_device_ptr, omp_target_memcpy_rect, host allocations, a
   second device and pinning: as LLVM's offload/test/ompt/veccopy_emi_map.c,
   target_memcpy_emi.c and target_tool_data_nowait.c see them. Not here: omp_target_memset
   (LLVM 19 reports the host-buffer copy it makes; offload fills on the device and reports
   nothing) and copies between devices (LLVM 19 copies through the host here; offload
   exchanges, reported as one transfer between the two devices, as later LLVM does). */

#include "ompt_tool.h"
#include <stdlib.h>
void *llvm_omp_target_alloc_host(size_t, int);
void llvm_omp_target_free_host(void *, int);
void *llvm_omp_target_lock_mem(void *, size_t, int);
void llvm_omp_target_unlock_mem(void *, int);
void __tgt_set_info_flag(uint32_t);

#pragma omp declare target
int g[8];
#pragma omp end declare target

struct S { int n; int *p; };

int main(void) {
  int a[64], c[4][4];
  for (int i = 0; i < 64; ++i) a[i] = i;
  for (int i = 0; i < 16; ++i) c[i / 4][i % 4] = i;
  int *heap = (int *)malloc(32 * sizeof(int));
  for (int i = 0; i < 32; ++i) heap[i] = 2 * i;
  struct S s = {32, heap};
  tool_name("a", a, sizeof a);
  tool_name("c", c, sizeof c);
  tool_name("heap", heap, 32 * sizeof(int));
  tool_name("s", &s, sizeof s);
  tool_name("g", g, sizeof g);
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  printf("-- nowait target + taskwait\n");
#pragma omp target map(tofrom : a) nowait
  a[0] += 100;
#pragma omp taskwait
  printf("a[0]=%d\n-- struct with pointee\n", a[0]);
#pragma omp target map(to : s) map(tofrom : s.p[0:32])
  s.p[1] += s.n;
  printf("heap[1]=%d\n-- declare target global\n", heap[1]);
#pragma omp target
  g[3] = 7;
#pragma omp target update from(g)
  printf("g[3]=%d\n-- present entry, always, alloc\n", g[3]);
#pragma omp target data map(alloc : a)
  {
#pragma omp target map(tofrom : a)
    a[1] = 5;
#pragma omp target map(always, tofrom : a[0:4])
    a[2] = 6;
#pragma omp target update to(a[8:8])
  }
  printf("a[1]=%d a[2]=%d\n-- use_device_ptr, after __tgt_set_info_flag(0)\n", a[1], a[2]);
  __tgt_set_info_flag(0);                // LIBOMPTARGET_INFO off: the tool still hears all
#pragma omp target data map(tofrom : a) use_device_ptr(heap)
  printf("in data\n");
  printf("-- rect, host alloc, present query\n");
  int *d = (int *)omp_target_alloc(sizeof c, dev);
  size_t vol[2] = {2, 2}, zero[2] = {0, 0}, off[2] = {1, 1}, dims[2] = {4, 4};
  omp_target_memcpy_rect(d, c, sizeof(int), 2, vol, zero, off, dims, dims, dev, host);
  omp_target_memcpy_rect(c, d, sizeof(int), 2, vol, off, zero, dims, dims, host, dev);
  printf("c[1][1]=%d present=%d\n", c[1][1], omp_target_is_present(a, dev));
  int *h = (int *)llvm_omp_target_alloc_host(64, dev);
  llvm_omp_target_free_host(h, dev);
  printf("-- second device\n");
  if (omp_get_num_devices() > 1) {
#pragma omp target device(1) map(tofrom : a[0:4])
    a[3] = 9;
    int *d1 = (int *)omp_target_alloc(sizeof c, 1);
    omp_target_memcpy(d1, c, sizeof c, 0, 0, 1, host);
    omp_target_free(d1, 1);
  }
  omp_target_free(d, dev);
  printf("-- lock\n");
  void *l = llvm_omp_target_lock_mem(a, sizeof a, dev);
  llvm_omp_target_unlock_mem(a, dev);
  printf("locked=%d\n-- done\n", l != NULL);
  free(heap);
  return 0;
}
