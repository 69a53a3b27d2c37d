// A C program's own SIGINT disposition survives the offload runtime's start: its handler
// runs on Ctrl-C (raise(SIGINT)) and the constructs after it do their work; an ignored
// SIGINT stays ignored.
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t caught;
static void on_int(int sig) { (void)sig; caught++; }

int main(int argc, char **argv) {
  int ignore = argc > 1 && strcmp(argv[1], "ignore") == 0;
  if (ignore)
    signal(SIGINT, SIG_IGN);
  else
    signal(SIGINT, on_int);
  int a[8], b[8];
  for (int i = 0; i < 8; i++) a[i] = i;
#pragma omp target enter data map(to : a)
#pragma omp target
  for (int i = 0; i < 8; i++) a[i] += 100;
  struct sigaction now;
  sigaction(SIGINT, NULL, &now);
  printf("disposition kept: %d\n", now.sa_handler == (ignore ? SIG_IGN : on_int));
  raise(SIGINT);
  raise(SIGINT);
#pragma omp target exit data map(from : a)
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int *d = omp_target_alloc(sizeof b, dev);
  int rc1 = omp_target_memcpy(d, a, sizeof a, 0, 0, dev, host);
  raise(SIGINT);
  int rc2 = omp_target_memcpy(b, d, sizeof b, 0, 0, host, dev);
  omp_target_free(d, dev);
  printf("handler ran %d times; a[3]=%d b[7]=%d copies %d %d\n", (int)caught, a[3], b[7], rc1,
         rc2);
  return 0;
}
