"""What the LLVM-rule tests share: their C kernels, a device's counts, a plugin's calls."""
import pytest

import offload

SOURCE = """
void add111(int *x) { *x += 111; }
void set222(int *x) { *x = 222; }
void fill(double *a, long n, double v) { for (long i = 0; i < n; ++i) a[i] = v; }
void touch(void *p, long n) { (void)p; (void)n; }
void scale(float *a, long n, float f) { for (long i = 0; i < n; ++i) a[i] *= f; }
void bytes(unsigned char *p, char *q, long n) { (void)p; (void)q; (void)n; }
"""


@pytest.fixture(scope="module")
def k():
    return offload.compile_c(SOURCE)


def state(dev=0):
    return offload.testing.state()["devices"].get(dev, {"mappings": 0, "allocations": 0})


def calls(plugin, kind):
    return [c for c in plugin.calls if c[0] == kind]
