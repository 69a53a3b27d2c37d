// Reductions on mapped arrays (BabelStream's Dot): each region maps its scalar and runs
// on arrays mapped before it, over and over, then from several threads at once, each with
// its own scalar. Every sum is checked; the program prints how many were right. On a
// GPU the compiled core launches these (a launch environment and reduction buffer per
// stream, zeroed before each launch): a counter left from the previous launch would
// corrupt the next sum. argv[1]: threads (4).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define ROUNDS 200
#define THREADS 4
static double a[N], b[N];
static int right[THREADS];

static double dot(int n) {
  double sum = 0.0;
  double *pa = a, *pb = b;
#pragma omp target teams distribute parallel for map(tofrom: sum) reduction(+: sum)
  for (int i = 0; i < n; i++)
    sum += pa[i] * pb[i];
  return sum;
}

static double expected(int n) {        // a[i] * b[i] = 2 i: 2 * (n - 1) n / 2
  return (double)(n - 1) * n;
}

static void *worker(void *arg) {
  long t = (long)arg;
  for (int r = 0; r < ROUNDS; r++) {
    int n = N - 64 * (int)t - r;       // a different length each time
    right[t] += dot(n) == expected(n);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : THREADS;
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 2.0;
  }
#pragma omp target enter data map(to: a[0:N], b[0:N])
  int ok = 0;
  for (int r = 0; r < ROUNDS; r++)
    ok += dot(N) == expected(N);
  printf("one thread: %d of %d right\n", ok, ROUNDS);
  pthread_t th[THREADS];
  for (long t = 0; t < threads && t < THREADS; t++)
    pthread_create(&th[t], NULL, worker, (void *)t);
  for (int t = 0; t < threads && t < THREADS; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < threads && t < THREADS; t++)
    printf("thread %d: %d of %d right\n", t, right[t], ROUNDS);
#pragma omp target exit data map(release: a[0:N], b[0:N])
  return 0;
}
