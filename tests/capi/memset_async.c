// omp_target_memset(_async) and omp_target_memcpy_async with a depend object.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int dev = 0, host = omp_get_initial_device();
  unsigned char buf[64] = {0};
  unsigned char *d = (unsigned char *)omp_target_alloc(64, dev);
  omp_target_memset(d, 0xAB, 64, dev);
  omp_target_memset_async(d + 8, 0x11, 8, dev, 0, NULL);
#pragma omp taskwait
  omp_depend_t obj;
#pragma omp depobj(obj) depend(inout : buf)
  int rc = omp_target_memcpy_async(buf, d, 64, 0, 0, host, dev, 1, &obj);
#pragma omp taskwait
  printf("memcpy_async rc %d: %02x %02x %02x %02x\n", rc, buf[0], buf[8], buf[15], buf[16]);
#pragma omp depobj(obj) destroy
  omp_target_free(d, dev);
  return 0;
}
