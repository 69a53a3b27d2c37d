"""What test_single_range_paths.py and its siblings share."""
import numpy as np

import offload
from offload import OffloadError
from offload.mapping import MappingTable

SRC = "void inc(int *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n"


def _general_only(monkeypatch):
    """Route begin_single_range/end_single_range through target_data_begin/target_data_end
    (tables made after this; OFFLOAD_ACCEL=0 keeps the C versions away)."""
    monkeypatch.setattr(MappingTable, "begin_single_range", MappingTable.begin_general)
    monkeypatch.setattr(MappingTable, "end_single_range", MappingTable.end_general)


def _counting(monkeypatch):
    """Count the calls that reach the Python begin_single_range/end_single_range (tables made after
    this): all of them without the accelerator, its fallbacks with it."""
    calls = {"begin": 0, "end": 0}
    begin, end = MappingTable.begin_single_range, MappingTable.end_single_range

    def counted_begin(*args, **kw):
        calls["begin"] += 1
        return begin(*args, **kw)

    def counted_end(*args, **kw):
        calls["end"] += 1
        return end(*args, **kw)
    monkeypatch.setattr(MappingTable, "begin_single_range", counted_begin)
    monkeypatch.setattr(MappingTable, "end_single_range", counted_end)
    return calls


def _accelerated() -> bool:
    """Whether tables on the host run begin_single_range/end_single_range in C here."""
    table = offload.runtime.current().device(0).table
    return table.steps.begin_single_range.__class__.__name__ == "Method"


def _scenario():
    """Run a fixed sequence of constructs; after each, the table (offsets from a, sizes,
    counts, busy marks), the array and the device copies, or the error raised."""
    k = offload.compile_c(SRC)
    a = np.arange(64, dtype=np.int32)
    table = offload.runtime.current().device(0).table
    base = a.ctypes.data
    steps = [
        lambda: offload.target_enter_data(offload.to(a), device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0),
        lambda: offload.target_exit_data(offload.from_(a), device=0),      # copies back
        lambda: offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.to(a)], device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.from_(a)], device=0),
        lambda: offload.target_enter_data(offload.alloc(a), device=0),
        lambda: offload.target_enter_data(offload.to(a), device=0),        # present: no copy
        lambda: offload.target(k.inc, a[:16], 16, map=[offload.tofrom(a[:16])], device=0),
        lambda: offload.target(k.inc, a[8:16], 8, map=[offload.tofrom(a[8:16])], device=0),
        lambda: offload.target_exit_data(offload.from_(a), device=0),
        lambda: offload.target_exit_data(offload.from_(a), device=0),      # last: copies
        lambda: offload.target_exit_data(offload.from_(a), device=0),      # absent: nothing
        lambda: offload.target_enter_data(offload.to(a[:16]), device=0),
        lambda: offload.target(k.inc, a, a.size, map=[offload.tofrom(a)], device=0),  # extends
        lambda: offload.target_enter_data(offload.tofrom(a), device=0),   # extends
        lambda: offload.target_exit_data(offload.release(a[:16]), device=0),
        lambda: offload.target_exit_data(offload.delete(a), device=0),
        lambda: offload.target_enter_data(offload.to(a), device=0),
        lambda: np.add(a, 100, out=a),
        lambda: offload.target_update(from_=[a[8:16]], device=0),    # inside the mapping
        lambda: offload.target_update(to=[a], device=0),
        lambda: offload.target(k.inc, a, a.size, device=0),           # on mapped data
        lambda: offload.target_update(from_=[a], device=0),
        lambda: offload.target_update(to=[a[60:64], a[:4]], device=0),
        lambda: offload.target_update(from_=[np.zeros(4, np.int32)], device=0),  # absent
        lambda: offload.target_update(to=[a], from_=[a[:2]], device=0),
        lambda: offload.target_exit_data(offload.delete(a), device=0),
        lambda: offload.target_update(to=[a], device=0),              # absent: skipped
        lambda: offload.target(k.inc, a, a.size, device=0),    # unmapped: tofrom for it
        lambda: offload.target_enter_data(offload.to(a[:32]), device=0),
        lambda: offload.target(k.inc, a[16:32], 16, device=0),        # inside a mapping
        lambda: offload.target(k.inc, a, 16, device=0),     # its first bytes mapped: those
        lambda: offload.target_exit_data(offload.from_(a[:32]), device=0),
    ]
    trace = []
    for step in steps:
        try:
            step()
            what = "ok"
        except OffloadError as exc:
            what = (exc.code, exc.message.replace(hex(base), "A"))
        entries = [(e.hst_begin - base, e.size, e.dyn, e.hold, e.busy)
                   for e in table.entries()]
        device = [np.frombuffer((np.ctypeslib.as_ctypes_type(np.uint8) * e.size)
                                .from_address(e.tgt_begin), np.uint8).tobytes()
                  for e in table.entries()]
        gen = offload.runtime.current().device(0).generic
        memory = (dict(gen.stats), gen.live_allocations(), gen.pool.bytes)
        trace.append((what, entries, a.tolist(), device, memory))
    return trace
