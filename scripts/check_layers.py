"""Check that offload's imports point down the layers of docs/design.md §1 (run by .ci/run),
and that the compiled mapping core's C reaches Python objects only through its one
declared interface (offload/accel_c/interface.c), never a mapping class's attribute.

Layers are whole numbers, and the folders show them: a module's layer follows from
its folder (mapping/, capi/, pykernels/, testing/, the three groups of plugins/), and
only the top-level modules are listed by name. A module imports from its own layer
or from lower ones; within a layer the imports form no cycle, and the four Python
front ends (api, omp, target, interop) never import one another.
"""
from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "offload"

#: the layers, lowest first: (name, what it holds)
NAMES = (
    ("foundations", "errors, configuration, clauses and arrays, tracing, the compiler cache"),
    ("bindings", "the driver libraries through cffi (plugins/_*.py), NVRTC, Python kernels"),
    ("plugin common", "GenericPlugin / GenericDevice and the policy every vendor shares"),
    ("vendor plugins", "host, CUDA and AMDGPU: hooks only"),
    ("mapping", "the mapping table and its rules (mapping/)"),
    ("runtime", "Device, PluginManager, nowait work, the per-process Runtime"),
    ("Python API", "api, omp*, target, interop and what they share above the runtime"),
    ("C ABI", "libomptarget.so.19.1's exports (capi/)"),
    ("package", "offload/__init__.py"),
)
FOUNDATIONS, BINDINGS, PLUGIN_COMMON, VENDOR, MAPPING, RUNTIME, PYTHON_API, C_ABI, PACKAGE = \
    range(len(NAMES))

#: folders whose modules all sit in one layer
FOLDERS = {"mapping": MAPPING, "capi": C_ABI, "pykernels": BINDINGS, "testing": PYTHON_API}
#: plugins/: vendor files by their prefix; binding modules start with "_"; the rest is common
VENDOR_PREFIXES = ("host", "cuda", "amdgpu", "_cuda_openmp")
#: the top-level modules, by layer
TOP = {
    FOUNDATIONS: ("errors", "locks", "_lazy", "completions", "tracing", "routes", "interrupts",
                  "cache_dir", "config", "ffi_cache", "profile", "trace", "image", "pinned",
                  "entries", "dlpack", "arrays", "clauses", "diagnostics", "compiler",
                  "_accel"),
    PLUGIN_COMMON: ("targets",),
    RUNTIME: ("device", "plugin_manager", "nowait", "runtime"),
    PYTHON_API: ("api", "omp", "omp_common", "omp_copies", "omp_async", "target", "interop",
                 "inventory", "prelock", "statistics", "allocators", "cli"),
    PACKAGE: ("__init__",),
}
#: front ends that share only what lies below them
SIBLINGS = ("api", "omp", "target", "interop")


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    name = ".".join(rel.parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") and name != "__init__" else name


def layer_of(name: str) -> int | None:
    """The layer of module `name` (dotted, below offload), or None where it has none."""
    folder, _, leaf = name.rpartition(".")
    top = name.split(".")[0]
    if top in FOLDERS:
        return FOLDERS[top]
    if top == "plugins":
        if not folder:
            return VENDOR  # plugins/__init__.py: the built-in plugins' names
        if leaf.startswith(VENDOR_PREFIXES):
            return VENDOR
        return BINDINGS if leaf.startswith("_") else PLUGIN_COMMON
    return next((n for n, mods in TOP.items() if name in mods), None)


def imports(path: pathlib.Path, name: str) -> set[str]:
    """The offload modules that the module at `path`, named `name`, imports."""
    parts = name.split(".")
    pkg = parts if path.name == "__init__.py" and name != "__init__" else parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            if node.module is None:
                out |= {".".join(base + [a.name]) for a in node.names}
            else:
                out.add(".".join(base + [node.module]))
        elif isinstance(node, ast.Import):
            out |= {a.name[len("offload."):] for a in node.names if a.name.startswith("offload.")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("offload."):
            out.add(str(node.module)[len("offload."):])
    return out


def graph() -> dict[str, set[str]]:
    """Every module of offload and the offload modules it imports."""
    mods = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    return {n: {d for d in imports(p, n) if d in mods and d != n} for n, p in mods.items()}


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle among `edges`, or []."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        path.append(n)
        for d in sorted(edges.get(n, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[n] = 2
        path.pop()
        return []

    for n in sorted(edges):
        if n not in state and (found := visit(n)):
            return found
    return []


def problems() -> list[str]:
    g = graph()
    bad = []
    for name in sorted(g):
        if layer_of(name) is None:
            bad.append(f"{name}: not placed in a layer (add it to TOP in scripts/check_layers.py)")
    placed: dict[str, int] = {n: lay for n in g if (lay := layer_of(n)) is not None}
    for name, deps in sorted(g.items()):
        if name not in placed or name == "__init__":
            continue
        for dep in sorted(deps & placed.keys()):
            if placed[dep] > placed[name]:
                bad.append(f"{name} ({NAMES[placed[name]][0]}, layer {placed[name]}) imports "
                           f"{dep} ({NAMES[placed[dep]][0]}, layer {placed[dep]})")
            elif name in SIBLINGS and dep in SIBLINGS:
                bad.append(f"{name} imports its sibling {dep}: what they share belongs below them")
    same = {n: {d for d in deps if placed.get(d) == placed.get(n)}
            for n, deps in g.items() if n in placed and n != "__init__"}
    if found := cycle(same):
        bad.append("import cycle within a layer: " + " -> ".join(found))
    return bad


#: the compiled core's C and its one declared interface
CORE = "accel_c"
INTERFACE = "interface.c"
#: owners whose attributes the C must never name: the mapping classes (the core owns
#: their state as its own types instead)
MAPPING_OWNERS = ("offload.mapping", "offload.entries")
#: C API calls that name an attribute with a string literal
_BY_LITERAL = re.compile(r"\b(PyObject_(?:Get|Set|Has|Del)AttrString|PyObject_CallMethod|"
                         r"PyUnicode_InternFromString|_PyObject_GetAttrId)\s*\(")
#: C API calls (and the core's two helpers over them) whose second argument is an
#: attribute name object; a helper's own call passes its parameter `name` on a line marked
#: with HELPER_MARK
HELPER_MARK = "/* a name its caller declared */"
_BY_NAME = re.compile(r"\b(PyObject_(?:Get|Set|Del)Attr|PyObject_HasAttr|attr_size|attr_false|"
                      r"PyObject_CallMethod(?:NoArgs|OneArg|ObjArgs)|PyObject_VectorcallMethod)"
                      r"\s*\(\s*[^,()]+(?:\([^()]*\))?\s*,\s*([A-Za-z_][A-Za-z_0-9]*)")
_DECLARED = re.compile(r"\{&(s_[a-z_0-9]+),\s*\"([^\"]+)\",\s*\"([^\"]+)\"\}")


def interface(root: pathlib.Path | None = None) -> list[tuple[str, str, str]]:
    """(variable, owner, name) of each entry of the core's declared interface."""
    path = (root or ROOT) / CORE / INTERFACE
    return _DECLARED.findall(path.read_text()) if path.exists() else []


def c_problems(root: pathlib.Path | None = None) -> list[str]:
    """Where the core's C names an attribute outside its declared interface, names one of
    a mapping class, or declares a name it never uses."""
    folder = (root or ROOT) / CORE
    declared = interface(root)
    if not declared:
        return [f"{CORE}/{INTERFACE}: no declared interface found"]
    names = {var for var, _, _ in declared}
    bad = [f"{CORE}/{INTERFACE}: {owner}.{name} is an attribute of a mapping class (the core "
           f"owns that state: offload/accel_c/table.c)"
           for _, owner, name in declared if owner.startswith(MAPPING_OWNERS)]
    used: set[str] = set()
    for path in sorted(folder.glob("*.c")):
        if path.name == INTERFACE:
            continue
        text = path.read_text()
        used |= set(re.findall(r"\bs_[a-z_0-9]+\b", text))
        for n, line in enumerate(text.splitlines(), 1):
            if m := _BY_LITERAL.search(line):
                bad.append(f"{CORE}/{path.name}:{n}: {m.group(1)} names an attribute by a "
                           f"string: declare it in {INTERFACE}")
            for m in _BY_NAME.finditer("" if line.startswith("static ") else line):
                if m.group(2) not in names and not (m.group(2) == "name" and
                                                    line.rstrip().endswith(HELPER_MARK)):
                    bad.append(f"{CORE}/{path.name}:{n}: {m.group(1)} with {m.group(2)}, a name "
                               f"not declared in {INTERFACE}")
    bad += [f"{CORE}/{INTERFACE}: {var} is declared and never used" for var in sorted(names - used)]
    return bad


def main() -> int:
    bad = problems() + c_problems()
    for line in bad:
        print(line)
    print(f"layers and the core's C interface: {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
