"""A profiled run on device 0 (LIBOMPTARGET_PROFILE): 256 MiB mapped tofrom unpinned
(staged on a GPU), the same pinned with 4 nowait updates and a kernel over it; prints the
trace's summary beside offload.stats() for the same work (the bytes by route must agree)
and draws the timeline.

    python3 bench/profile_run.py OUT_DIR [MiB]
"""
import os
import sys

import numpy as np


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "profile.json")
    os.environ["LIBOMPTARGET_PROFILE"] = path
    import offload
    from offload import trace

    k = offload.compile_c("void add_one(int *a, long n) { for (long i = 0; i < n; ++i) "
                          "a[i] += 1; }")
    if any(d.plugin == "cuda" for d in offload.devices()):
        k = offload.Image.combine(k, offload.compile_cuda(
            'extern "C" __global__ void add_one(int *a, long n) { long i = blockIdx.x * '
            '(long)blockDim.x + threadIdx.x; if (i < n) a[i] += 1; }'))
    a = np.zeros(mib << 18, np.int32)
    before = offload.stats(0)
    with offload.target_data(offload.tofrom(a), device=0):
        pass
    with offload.locked(a, device=0):
        with offload.target_data(offload.tofrom(a), device=0):
            hs = [offload.target_update(to=[a], device=0, nowait=True) for _ in range(4)]
            for h in hs:
                h.wait()
            offload.target(k.add_one, a, a.size, device=0, teams=(a.size + 255) // 256,
                           threads=256)
    after = offload.stats(0)
    ok = bool((a == 1).all())
    offload.shutdown()
    s = trace.summarize(trace.load(path))
    print(trace.format_summary(s))
    print()
    print(f"{'route':<10}{'trace MiB':>12}{'stats MiB':>12}")
    agree = True
    for r in ("pinned", "staged", "pageable", "host"):
        counted = after["bytes"][r] - before["bytes"][r]
        traced = s.routes[r].bytes if r in s.routes else 0
        agree &= counted == traced
        print(f"{r:<10}{traced / 2**20:>12.1f}{counted / 2**20:>12.1f}")
    try:
        trace.draw(trace.load(path), s, os.path.join(out, "profile.png"))
    except offload.OffloadError as exc:
        print(f"no timeline: {exc}")
    print("PASS" if ok and agree else "FAIL")
    return 0 if ok and agree else 1


if __name__ == "__main__":
    sys.exit(main())
