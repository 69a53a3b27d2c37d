"""offload.tracing: the runtime's data operations told to a tool (what the C API hands an
OMPT tool; tests/capi/ompt_*.c compare that with LLVM 19). Here a Python tool records
them from the Python API: begin and end of each, in order, with the addresses and
devices; a table made while the tool listens keeps off the fewer-steps paths (they tell
no one), and one made without it is untouched."""
import numpy as np
import pytest

import offload
from offload import tracing


class Recorder:
    def __init__(self):
        self.events = []
        self.images = []

    def data_op(self, begin, op, src, src_device, dst, dst_device, size):
        self.events.append((begin, op, src, src_device, dst, dst_device, size))

    def image_loaded(self, device, image):
        self.images.append((device, len(image)))


@pytest.fixture
def tool(runtime):
    t = Recorder()
    tracing.tool = t
    try:
        runtime(OFFLOAD_HOST_NUM_DEVICES=2)
        yield t
    finally:
        tracing.tool = None


def ops(t):
    return [(e[0], e[1]) for e in t.events]


def test_map_region_and_unmap_in_order(tool, add_one):
    table = offload.runtime.current().manager.get_device(0).table
    assert table.traced and table.observed and not table.info
    a = np.arange(64, dtype=np.int32)
    p = a.ctypes.data
    offload.target_enter_data(offload.to(a), device=0)
    tgt = table.lookup(p, a.nbytes).tgt_begin
    offload.target(add_one.add_one, a, 0, 64, device=0)     # on mapped data: no copy
    offload.target_update(from_=[a], device=0)
    offload.target_exit_data(offload.from_(a), device=0)
    A, TO, FROM, DEL = tracing.ALLOC, tracing.TO_DEVICE, tracing.FROM_DEVICE, tracing.DELETE
    assert ops(tool) == [(True, A), (False, A), (True, TO), (False, TO), (True, FROM),
                         (False, FROM), (True, FROM), (False, FROM), (True, DEL), (False, DEL)]
    ev = tool.events
    assert ev[0] == (True, A, p, None, 0, 0, 256) and ev[1] == (False, A, p, None, tgt, 0, 256)
    assert ev[2] == (True, TO, p, None, tgt, 0, 256)
    assert ev[4] == (True, FROM, tgt, 0, p, None, 256)
    assert ev[8] == (True, DEL, tgt, 0, 0, -1, 0)
    assert (a == np.arange(64) + 1).all()


def test_device_api_and_associations(tool):
    d = offload.omp_target_alloc(128, 1)
    a = np.ones(32, dtype=np.int32)
    init = offload.omp_get_initial_device()
    assert offload.omp_target_memcpy(d, a, 128, 0, 0, 1, init) == 0
    assert offload.omp_target_associate_ptr(a, d, 128, 0, 1) == 0
    assert offload.omp_target_disassociate_ptr(a, 1) == 0
    offload.omp_target_free(d, 1)
    A, TO, AS, DIS, DEL = (tracing.ALLOC, tracing.TO_DEVICE, tracing.ASSOCIATE,
                           tracing.DISASSOCIATE, tracing.DELETE)
    assert ops(tool) == [(True, A), (False, A), (True, TO), (False, TO), (True, AS),
                         (False, AS), (True, DIS), (False, DIS), (True, DEL), (False, DEL)]
    assert tool.events[1] == (False, A, 0, None, d, 1, 128)
    assert tool.events[4] == (True, AS, a.ctypes.data, None, d, 1, 128)
    assert tool.events[6] == (True, DIS, a.ctypes.data, None, 0, 1, 0)


def test_a_failed_operation_still_ends(tool, monkeypatch):
    dev = offload.runtime.current().manager.get_device(0)
    from offload.errors import ErrorCode, OffloadError

    def refuse(*args):
        raise OffloadError(ErrorCode.OUT_OF_RESOURCES, "no memory")
    monkeypatch.setattr(dev.generic, "alloc", refuse)
    a = np.zeros(8)
    with pytest.raises(OffloadError, match="no memory"):
        offload.target_enter_data(offload.to(a), device=0)
    assert ops(tool) == [(True, tracing.ALLOC), (False, tracing.ALLOC)]
    assert tool.events[1][4] == 0                      # no address came
    assert dev.table.entries() == []


def test_no_tool_no_events_and_tables_untraced(runtime):
    assert tracing.tool is None
    runtime()
    table = offload.runtime.current().manager.get_device(0).table
    assert not table.traced and not table.observed
    with tracing.alloc(0, 0, 8) as op:                 # the shared no-tool context
        op.dst = 1
    assert tracing.data_op(tracing.DELETE, 1, 0, 0, -1, 0) is tracing._NONE


def test_info_bits_and_listening_are_apart(runtime):
    """LIBOMPTARGET_INFO holds only its own bits; a listener is `traced`; either keeps the
    table `observed` (off every fewer-steps path) and each can go without the other."""
    runtime(LIBOMPTARGET_INFO=0x20)
    table = offload.runtime.current().manager.get_device(0).table
    assert (table.info, table.traced, table.observed) == (0x20, False, True)
    table.traced = True
    table.info = 0
    assert (table.info, table.traced, table.observed) == (0, True, True)
    table.traced = False
    assert not table.observed
    a = np.arange(16, dtype=np.int32)
    before = offload.stats(0)
    with offload.target_data(offload.tofrom(a)):
        pass
    assert offload.stats(0) != before            # the construct ran (and was counted)
