"""An entry found in one step and used in a later one, while another thread unmaps it in
between: every such use marks the entry in use when it finds it, so the unmapping waits
(as LLVM's implicit map(tofrom) of a present entry takes a reference under the table's
lock) and the work runs on live device memory, never on freed memory or with an error."""
import threading

import numpy as np

import offload

SRC = ("void add(int *a, const int *b, long n) { for (long i = 0; i < n; ++i) a[i] += b[i]; }\n"
       "void inc(int *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n")


def _deleting_between(monkeypatch, table, obj, step, arr):
    """At `obj`'s next call of `step`, another thread deletes `arr`'s mapping; the call
    goes on once that thread is done or waits on `table` (for an entry still in use)."""
    real = getattr(obj, step)
    state = {"thread": None, "error": None}

    def delete():
        try:
            offload.target_exit_data(offload.delete(arr), device=0)
        except BaseException as exc:       # noqa: BLE001 - reported by the test
            state["error"] = exc

    def hooked(*args, **kw):
        if state["thread"] is None:
            t = threading.Thread(target=delete)
            state["thread"] = t
            t.start()
            while t.is_alive() and not table._core.waiting:
                t.join(0.001)
        return real(*args, **kw)
    monkeypatch.setattr(obj, step, hooked)
    return state


def test_a_region_argument_mapped_elsewhere_stays_while_the_region_runs(runtime, monkeypatch):
    """A region's argument mapped only by an earlier enter (no clause of the region names
    it) and deleted by another thread while the region maps its clauses: the region runs
    on the still-mapped copy, the delete waits for it, and nothing is left mapped."""
    runtime()
    k = offload.compile_c(SRC)
    a = np.zeros(64, dtype=np.int32)
    b = np.arange(64, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    live = dev.generic.live_allocations()
    offload.target_enter_data(offload.to(a), device=0)
    state = _deleting_between(monkeypatch, dev.table, dev.table, "target_data_begin", a)
    offload.target(k.add, a, b, a.size, map=[offload.to(b)], device=0)
    state["thread"].join(60)
    assert not state["thread"].is_alive()
    assert state["error"] is None, state["error"]
    assert len(dev.table) == 0
    assert dev.generic.live_allocations() == live
    np.testing.assert_array_equal(a, 0)          # deleted: never copied back


def test_a_strided_update_holds_its_entry_while_it_copies(runtime, monkeypatch):
    """A strided update of a view into a mapped array, the array deleted by another thread
    as the update starts its copy: the copy goes to live device memory and the delete
    waits for it."""
    runtime()
    a = np.arange(64, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    live = dev.generic.live_allocations()
    offload.target_enter_data(offload.to(a), device=0)
    seen = []
    real = dev.plugin.data_update_strided

    def strided(*args, **kw):
        seen.append([e.busy for e in dev.table.entries()])
        return real(*args, **kw)
    monkeypatch.setattr(dev.plugin, "data_update_strided", strided)
    state = _deleting_between(monkeypatch, dev.table, dev.plugin, "data_update_strided", a)
    offload.target_update(to=[a[::2]], device=0)
    state["thread"].join(60)
    assert state["error"] is None, state["error"]
    [busy] = seen                                 # still mapped as it copied, and in use
    assert len(busy) == 1 and busy[0] >= 1
    assert len(dev.table) == 0
    assert dev.generic.live_allocations() == live


def test_a_device_array_holds_its_block_before_a_delete_can_free_it(runtime, monkeypatch):
    """device_array of a mapped array, the array deleted by another thread just before the
    view holds its block: the delete waits, the view's block outlives the mapping, and it
    is freed once the view goes."""
    import gc
    runtime()
    a = np.arange(64, dtype=np.int32)
    dev = offload.runtime.current().device(0)
    live = dev.generic.live_allocations()
    offload.target_enter_data(offload.to(a), device=0)
    mapped = []
    blocks = dev.generic.exported
    real = blocks.hold

    def hold(*args, **kw):
        mapped.append(len(dev.table))
        return real(*args, **kw)
    monkeypatch.setattr(blocks, "hold", hold)
    state = _deleting_between(monkeypatch, dev.table, blocks, "hold", a)
    view = offload.device_array(a, device=0)
    state["thread"].join(60)
    assert state["error"] is None, state["error"]
    assert mapped == [1]                          # still mapped when the view held it
    assert len(dev.table) == 0
    assert len(blocks) == 1                       # freed by the delete, kept for the view
    del view
    gc.collect()
    assert len(blocks) == 0
    assert dev.generic.live_allocations() == live
