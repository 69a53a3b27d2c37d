"""Check that offload's imports point down the layers of docs/design.md §1 (run by .ci/run)."""
from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "offload"
# lower number = lower layer; a module may import only modules of a lower layer
LAYERS = {
    "errors": 0, "_lazy": 0, "cache_dir": 0.3, "ffi_cache": 0.6, "completions": 0, "tracing": 0, "routes": 0, "profile": 0.5, "trace": 1, "dlpack": 1, "config": 1, "arrays": 2, "clauses": 3, "entries": 2,
    "diagnostics": 4, "pinned": 2, "image": 2, "compiler": 3, "targets": 3,
    "plugins._libc": 3, "plugins.args": 2, "plugins.memory_pool": 3, "plugins.queues": 3,
    "plugins.staging": 4, "plugins.exported": 4, "plugins.record_replay": 4, "plugins._cuda_driver": 3, "plugins._cuda_memory": 4, "plugins._hsa_runtime": 3, "plugins._hsa_queues": 4,
    "plugins.nvrtc": 3, "_accel": 4, "plugins._cuda_fast": 4, "plugins._cuda_openmp": 5.2, "plugins.launch_geometry": 3, "plugins.waits": 1, "plugins.device_hooks": 4.5, "plugins.transfers": 4.7, "plugins.generic_device": 4.8, "plugins.common": 5, "plugins.host_queue": 5.5, "plugins._host_memory": 3, "plugins.host": 6, "plugins.cuda_kernels": 5.6, "plugins.cuda_device": 5.7, "plugins.cuda": 6,
    "plugins.amdgpu_device": 5.7, "plugins.amdgpu": 6, "plugins": 0, "mapping._base": 6.5, "mapping.motion": 6.6, "mapping.begin": 6.7, "mapping.end": 6.7, "mapping": 7, "device": 8, "plugin_manager": 9,
    "nowait": 9.5, "interrupts": 0.5, "runtime": 10, "prelock": 10.5, "inventory": 10.5, "api": 11, "omp_common": 10.6, "omp_copies": 10.7, "omp": 11, "target": 11, "interop": 11, "omp_async": 12, "statistics": 11, "allocators": 12, "testing": 12, "testing.conformance": 12, "cli": 12,
    "__init__": 13, "capi.abi": 0, "capi.images": 3, "capi.maps": 9, "capi.data": 12.45, "capi.device_api": 12.45, "capi.exports": 12.5, "capi.devices": 12.3, "capi.kernels": 12.4,
    "capi.interop_objects": 12.4, "pykernels.markers": 0, "pykernels.source": 1,
    "pykernels.signature": 2, "pykernels.atomics": 0, "pykernels.indices": 1.5,
    "pykernels.rewrite": 2,
    "pykernels.host": 3, "pykernels.cuda": 4, "pykernels": 12, "capi.ompt": 12.35,
    "capi.build": 12, "capi.openmp": 12.5, "capi": 12.2, "capi.__main__": 14, "capi.replay": 14,
}


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    name = ".".join(rel.parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") and name != "__init__" else name


def imports(path: pathlib.Path, name: str) -> set[str]:
    pkg = name.split(".")[:-1] if "." in name else []
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            mod = ".".join(base + ([node.module] if node.module else []))
            if node.module is None:
                out |= {".".join(base + [a.name]) for a in node.names}
            else:
                out.add(mod)
        elif isinstance(node, ast.Import):
            out |= {a.name[len("offload."):] for a in node.names if a.name.startswith("offload.")}
    return out


def main() -> int:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if name not in LAYERS:
            bad.append(f"{name}: not placed in a layer (add it to scripts/check_layers.py)")
            continue
        for dep in imports(path, name):
            if dep not in LAYERS:
                continue
            if LAYERS[dep] >= LAYERS[name] and name != "__init__":
                bad.append(f"{name} (layer {LAYERS[name]}) imports {dep} (layer {LAYERS[dep]})")
    for line in bad:
        print(line)
    print(f"layers: {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
