"""What the mapping tests share: the table and allocations of a device, a device copy."""
import numpy as np

import offload


def table(dev=0):
    return offload.runtime.current().manager.get_device(dev).table


def allocs(dev=0):
    """Live device allocations of device `dev` (offload.testing.state())."""
    return offload.testing.state()["devices"].get(dev, {}).get("allocations", 0)


def device_view(a, dev=0):
    """The device copy of array a (host devices: device memory is readable memory)."""
    e = table(dev).lookup(a.ctypes.data, a.nbytes)
    tgt = e.tgt_begin + (a.ctypes.data - e.hst_begin)
    out = np.empty_like(a)
    assert offload.omp_target_memcpy(out, tgt, a.nbytes, 0, 0,
                                     offload.omp_get_initial_device(), dev) == 0
    return out
