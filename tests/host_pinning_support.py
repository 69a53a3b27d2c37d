"""What the host pinning tests share: pages of a range, and the model-checked pin machine."""
import os

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import offload
from offload.plugins.host import PAGE

from .conftest import page_aligned, vmlck_kb


def _pages(p, n):
    return set(range(p // PAGE, -(-(p + n) // PAGE)))


class HostPinMachine(RuleBasedStateMachine):
    """Random lock/unlock on byte ranges of a 16-page buffer; VmLck follows the model."""

    def __init__(self):
        super().__init__()
        offload.shutdown()
        os.environ["OFFLOAD_PLUGINS"] = "host"
        os.environ["OFFLOAD_HOST_NUM_DEVICES"] = "2"
        self.buf = page_aligned(16 * PAGE)
        self.base = self.buf.ctypes.data
        self.base_kb = vmlck_kb()
        self.entries = []       # [start, end, {dev: count}]

    def teardown(self):
        offload.shutdown()
        os.environ.pop("OFFLOAD_PLUGINS")
        os.environ.pop("OFFLOAD_HOST_NUM_DEVICES")

    def _find(self, p, n):
        return [e for e in self.entries if e[0] < p + n and p < e[1]]

    @rule(off=st.integers(0, 16 * PAGE - 1), n=st.integers(1, 3 * PAGE), d=st.integers(0, 1))
    def lock(self, off, n, d):
        p = self.base + off
        n = min(n, 16 * PAGE - off)
        ov = self._find(p, n)
        inside = len(ov) == 1 and ov[0][0] <= p and p + n <= ov[0][1]
        addr = offload.llvm_omp_target_lock_mem(p, n, d)
        if inside or not ov:
            assert addr == p
            if inside:
                ov[0][2][d] = ov[0][2].get(d, 0) + 1
            else:
                self.entries.append([p, p + n, {d: 1}])
        else:
            assert addr == 0

    @rule(i=st.integers(0, 50), d=st.integers(0, 1), interior=st.booleans())
    def unlock(self, i, d, interior):
        if not self.entries:
            return
        e = self.entries[i % len(self.entries)]
        p = e[0] + ((e[1] - e[0]) // 2 if interior else 0)
        offload.llvm_omp_target_unlock_mem(p, d)
        if d in e[2]:
            e[2][d] -= 1
            if e[2][d] == 0:
                del e[2][d]
                if not e[2]:
                    self.entries.remove(e)

    @invariant()
    def vmlck_matches_model(self):
        pages = set()
        for s, e, _ in self.entries:
            pages |= _pages(s, e - s)
        assert vmlck_kb() - self.base_kb == len(pages) * PAGE // 1024
