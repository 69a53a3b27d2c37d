// teams distribute with collapse, a thread_limit and num_teams, and omp_get_team_num /
// omp_get_num_teams inside (LLVM offload/test/offloading: target_teams_* and
// thread_limit tests): every iteration runs exactly once.
#include <omp.h>
#include <stdio.h>

int main(void) {
  enum { N = 64, M = 48 };
  static int hits[N][M];
  int teams_seen = 0;
#pragma omp target teams distribute parallel for collapse(2) num_teams(8) thread_limit(64) \
    map(tofrom : hits) map(tofrom : teams_seen)
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++) {
      hits[i][j] += 1;
      if (i == 0 && j == 0) teams_seen = omp_get_num_teams() > 0;
    }
  long total = 0;
  int max = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++) {
      total += hits[i][j];
      if (hits[i][j] > max) max = hits[i][j];
    }
  printf("total %ld max %d teams reported %d\n", total, max, teams_seen);
  return 0;
}
