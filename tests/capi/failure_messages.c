// How each failing construct ends, line for line as LLVM 19 prints it (stderr; the test
// masks addresses): `present` on absent data for every construct (LLVM offload/test/
// mapping/present/target_present.c, target_data_present.c, target_update_present.c,
// target_exit_data_present.c), a `present` clause that also extends a mapping before or
// after it (target_array_extension.c, target_data_array_extension.c: the extension message,
// then the present one), an extension without `present` (target_data_extension.c), and a
// device number past the devices. argv[1] picks the case; with no argument, nothing fails.
#include <stdio.h>
#include <stdlib.h>

#define SIZE 100

int main(int argc, char **argv) {
  int arr[SIZE];
  int which = argc > 1 ? atoi(argv[1]) : -1;
  printf("case %d\n", which);
  fflush(stdout);
  switch (which) {
  case 0:
#pragma omp target map(present, tofrom : arr)
    arr[0] = 1;
    break;
  case 1:
#pragma omp target data map(present, tofrom : arr)
    ;
    break;
  case 2:
  {
#pragma omp target enter data map(present, to : arr)
  }
    break;
  case 3:
  {
#pragma omp target update to(present : arr)
  }
    break;
  case 4:
  {
#pragma omp target update from(present : arr)
  }
    break;
  case 5:
  {
#pragma omp target exit data map(present, from : arr)
  }
    break;
  case 6:                                    // extends after: arr[0:2] mapped, arr asked
#pragma omp target data map(alloc : arr[0:2])
    {
#pragma omp target map(present, tofrom : arr[0:SIZE])
      arr[0] = 1;
    }
    break;
  case 7:                                    // extends before: arr[98:2] mapped
#pragma omp target data map(alloc : arr[SIZE - 2:2])
    {
#pragma omp target data map(present, tofrom : arr[0:SIZE])
      ;
    }
    break;
  case 8:                                    // an extension without present
#pragma omp target data map(alloc : arr[0:2])
    {
#pragma omp target enter data map(to : arr[0:SIZE])
    }
    break;
  case 9:
#pragma omp target device(7) map(tofrom : arr)
    arr[0] = 1;
    break;
  default:
    break;
  }
  printf("not reached unless no case\n");
  return 0;
}
