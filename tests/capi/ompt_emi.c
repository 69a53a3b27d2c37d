/* OMPT: libomptarget's target, data-op and submit callbacks (EMI) for the constructs and
   the device-memory API, as LLVM's offload/test/ompt/veccopy_emi.c, veccopy_data.c and
   target_memcpy_emi.c check them; and ompt_libomptarget_connect, as a plugin calls it. */

#include "ompt_tool.h"
#include <stdlib.h>

/* a plugin library's side of ompt_libomptarget_connect: the callbacks the tool registered */
void ompt_libomptarget_connect(ompt_start_tool_result_t *result);
static int plugin_init(ompt_function_lookup_t lookup, int device, ompt_data_t *data) {
  ompt_get_callback_t get = (ompt_get_callback_t)lookup("ompt_get_callback");
  ompt_callback_t cb = NULL;
  int r = get ? get(ompt_callback_target_emi, &cb) : -1;
  printf("plugin connected: device %d, data %d, get_callback %d, the tool's target_emi %d\n",
         device, data != NULL, r, cb == (ompt_callback_t)on_target_emi);
  return 0;
}
static void plugin_fini(ompt_data_t *data) { printf("plugin finalized\n"); }

#define N 1000
int main(void) {
  int a[N], b[N];
  for (int i = 0; i < N; ++i) a[i] = i, b[i] = 0;
  tool_name("a", a, sizeof a);
  tool_name("b", b, sizeof b);
  int dev = omp_get_default_device();
  printf("-- target map(to: a) map(from: b)\n");
#pragma omp target map(to : a) map(from : b)
  for (int i = 0; i < N; ++i) b[i] = a[i] + 1;
  printf("b[7]=%d\n-- target data map(tofrom: a)\n", b[7]);
#pragma omp target data map(tofrom : a)
  {
    printf("-- target teams on mapped a, map(tofrom: b)\n");
#pragma omp target teams num_teams(4) map(tofrom : b)
    for (int i = 0; i < N; ++i) b[i] += a[i];
    printf("-- update from a\n");
#pragma omp target update from(a)
  }
  printf("-- enter data to a, exit data from a\n");
#pragma omp target enter data map(to : a[0:10])
#pragma omp target exit data map(from : a[0:10])
  printf("-- omp_target_alloc / memcpy / free\n");
  int *d = (int *)omp_target_alloc(N * sizeof(int), dev);
  omp_target_memcpy(d, a, N * sizeof(int), 0, 0, dev, omp_get_initial_device());
  omp_target_memcpy(b, d, N * sizeof(int), 0, 0, omp_get_initial_device(), dev);
  omp_target_free(d, dev);
  printf("-- associate / disassociate\n");
  int *d2 = (int *)omp_target_alloc(N * sizeof(int), dev);
  omp_target_associate_ptr(b, d2, N * sizeof(int), 0, dev);
  omp_target_disassociate_ptr(b, dev);
  omp_target_free(d2, dev);
  printf("b[7]=%d\n-- a plugin connects\n", b[7]);
  static ompt_start_tool_result_t plugin = {plugin_init, plugin_fini, {0}};
  ompt_libomptarget_connect(&plugin);
  ompt_libomptarget_connect(NULL);
  printf("-- done\n");
  return 0;
}
