// __tgt_target_kernel_replay (LLVM 19: interface.cpp and target_replay in omptarget.cpp;
// the entry llvm-omp-kernel-replay calls): the kernel found by its host region id runs
// with the arguments given (after the launch environment, which LLVM 19's runtime passes
// first), once the given device memory was copied into a new device allocation. On the host,
// device addresses are host addresses, so the arguments here point at this program's
// array; the kernel is the region below, found by name in the offload entry table.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct entry { void *addr; char *name; size_t size; int32_t flags; int32_t data; };
extern struct entry __start_omp_offloading_entries[], __stop_omp_offloading_entries[];
int __tgt_target_kernel_replay(void *loc, int64_t dev, void *host_ptr, void *memory,
                               int64_t size, void **args, ptrdiff_t *offsets, int32_t n,
                               int32_t teams, int32_t threads, uint64_t tripcount);

int g[8];

void replayed(void) {
#pragma omp target map(tofrom : g)
  for (int i = 0; i < 8; i++) g[i] = 3 * g[i] + 1;
}

int main(void) {
  replayed();                        // a normal run: the image is on the device now
  printf("after the region: %d %d\n", g[0], g[7]);
  void *region = NULL;
  for (struct entry *e = __start_omp_offloading_entries; e < __stop_omp_offloading_entries; e++)
    if (e->size == 0 && strstr(e->name, "replayed"))
      region = e->addr;
  if (!region) {
    printf("no region\n");
    return 1;
  }
  for (int i = 0; i < 8; i++) g[i] = i;
  char memory[64];
  memset(memory, 7, sizeof memory);
  void *args[1] = {(char *)g - 8};   // &g, with the offset below
  ptrdiff_t offsets[1] = {8};
  int rc = __tgt_target_kernel_replay(NULL, 0, region, memory, sizeof memory, args, offsets, 1,
                                      1, 1, 0);
  printf("replay rc %d: %d %d %d\n", rc, g[0], g[3], g[7]);
  rc = __tgt_target_kernel_replay(NULL, 0, region, NULL, 0, args, offsets, 1, 1, 1, 0);
  printf("again, no memory, rc %d: %d %d\n", rc, g[0], g[7]);
  return 0;
}
