// Launch geometry of clang-19 nvptx kernels (issue 27 item 10): the teams and threads
// each loop runs with, as LLVM 19's GenericKernelTy::getNumThreads/getNumBlocks choose
// them (offload/test/offloading/high_trip_count_block_limit.cpp: 819200 iterations of a
// combined loop get one thread each only with LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT
// false; by default the teams stop at 3200 and each thread takes two). GPU only: the
// host plugin runs one thread per team. tests/capi/test_capi_gpu.py states what each line is.
#include <omp.h>
#include <stdio.h>

#define N 819200
static int teams[N], threads[N];

static void combined(const char *name, int n) {
#pragma omp target teams distribute parallel for map(from: teams[0:n], threads[0:n])
  for (int i = 0; i < n; i++) {
    teams[i] = omp_get_num_teams();
    threads[i] = omp_get_num_threads();
  }
  printf("%s %d %d\n", name, teams[0], threads[0]);
}

int main(void) {
  combined("high", N);               // 6400 blocks of 128 wanted: 3200 by default
  combined("mid", 200000);           // fewer than 3200*128: 64 threads (a power of two)
  combined("low", 1000);             // fewer than 3200*32: 32 threads
#pragma omp target teams distribute parallel for thread_limit(256) \
    map(from: teams[0:N], threads[0:N])
  for (int i = 0; i < N; i++) {
    teams[i] = omp_get_num_teams();
    threads[i] = omp_get_num_threads();
  }
  printf("thread_limit %d %d\n", teams[0], threads[0]);
#pragma omp target teams distribute map(from: teams[0:10])
  for (int i = 0; i < 10; i++)       // a teams loop: one team per iteration
    teams[i] = omp_get_num_teams();
  printf("distribute %d\n", teams[0]);
#pragma omp target teams map(from: teams[0:1])
  if (omp_get_team_num() == 0)       // no loop: the default team count
    teams[0] = omp_get_num_teams();
  printf("teams %d\n", teams[0]);
  return 0;
}
