"""The package's face: public names, docstrings, version, documented variables, --help."""
import inspect
import os
import shutil
import subprocess
import sys
import types
from importlib import metadata

import pytest

import offload
from offload import config
from tests.scripts_support import check_layers as check_layers_script

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_all_is_exactly_the_public_names():
    public = {n for n in dir(offload) if not n.startswith("_")
              and not isinstance(getattr(offload, n), types.ModuleType)}
    assert set(offload.__all__) == public
    assert len(offload.__all__) == len(set(offload.__all__))


def test_every_public_function_and_class_has_a_docstring():
    missing = []
    for name in offload.__all__:
        obj = getattr(offload, name)
        if not (callable(obj) or inspect.isclass(obj)):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            missing += [f"{name}.{m}" for m, v in vars(obj).items()
                        if not m.startswith("_") and callable(v) and not (v.__doc__ or "").strip()]
    assert missing == []


def test_version_comes_from_the_package_metadata():
    try:
        expected = metadata.version("offload")
    except metadata.PackageNotFoundError:          # a source tree on PYTHONPATH
        expected = "0+unknown"
    assert offload.__version__ == expected


def test_every_variable_is_documented():
    readme = open(os.path.join(ROOT, "README.md")).read()
    env_doc = open(os.path.join(ROOT, "docs", "environment.md")).read()
    for name in config.VARIABLES:
        assert f"`{name}`" in readme, name
        assert f"`{name}`" in env_doc, name
    for bit in config.Info:
        assert f"`{bit.name}`" in env_doc, bit.name


def test_readme_tables_render():
    """A '|' inside a table cell must be escaped, or the row grows columns."""
    for line in open(os.path.join(ROOT, "README.md")):
        if line.startswith("| `") and line.count("|") - line.count("\\|") > 0:
            cells = line.replace("\\|", "").strip().strip("|").split("|")
            assert len(cells) in (2, 4), line


def test_the_layer_check_passes_and_catches_an_upward_import(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_layers.py")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    check_layers = check_layers_script()
    bad = tmp_path / "pinned.py"
    bad.write_text("from .api import lock\n")
    assert "api" in check_layers.imports(bad, "pinned")
    assert check_layers.layer_of("api") > check_layers.layer_of("pinned")


def test_layers_are_whole_numbers_shown_by_the_folders():
    check_layers = check_layers_script()
    layers = {check_layers.layer_of(check_layers.module_name(p))
              for p in check_layers.ROOT.rglob("*.py")}
    assert None not in layers and all(isinstance(n, int) for n in layers)
    assert check_layers.layer_of("mapping.begin") == check_layers.MAPPING
    assert check_layers.layer_of("capi.maps") == check_layers.C_ABI
    assert check_layers.layer_of("plugins.cuda_device") == check_layers.VENDOR
    assert check_layers.layer_of("plugins._cuda_driver") == check_layers.BINDINGS
    assert check_layers.layer_of("plugins.generic_device") == check_layers.PLUGIN_COMMON


def test_the_layer_check_reports_each_kind_of_problem(tmp_path, monkeypatch):
    """An upward import, a cycle within a layer, two front ends importing each other and a
    module in no layer are each named (a copy of the tree with one fault planted each)."""
    check_layers = check_layers_script()
    plants = {
        "pinned.py": ("from .api import lock\n", "pinned (foundations, layer 0) imports api"),
        "errors.py": ("from .config import x\n", "import cycle within a layer"),
        "omp.py": ("from .target import target\n", "omp imports its sibling target"),
        "stray.py": ("", "stray: not placed in a layer"),
    }
    for file, (text, want) in plants.items():
        tree = tmp_path / file.replace(".", "_") / "offload"
        shutil.copytree(check_layers.ROOT, tree,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
        target = tree / file
        target.write_text((target.read_text() if target.exists() else "") + text)
        monkeypatch.setattr(check_layers, "ROOT", tree)
        found = check_layers.problems()
        assert any(want in line for line in found), (file, found)


@pytest.mark.parametrize("cmd", [
    ["-m", "offload.cli"], ["examples/prelock.py"], ["bench/lock.py"], ["bench/overhead.py"],
    ["bench/transfers.py"], ["bench/staging.py"], ["bench/peer.py"], ["bench/profile_cost.py"],
])
def test_every_command_has_help(cmd):
    out = subprocess.run([sys.executable, *cmd, "--help"], capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                             [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])))
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def test_no_docstring_refers_to_a_file_outside_the_repository():
    """The design page and the rule book are in docs/: nothing in offload/ or scripts/
    cites the team's DESIGN.md / SEMANTICS.md or ../shared."""
    import pathlib
    bad = []
    for path in [*pathlib.Path(ROOT, "offload").rglob("*.py"),
                 *pathlib.Path(ROOT, "scripts").rglob("*.py")]:
        text = path.read_text()
        for word in ("DESIGN.md", "SEMANTICS.md", "DESIGN §", "../shared"):
            if word in text:
                bad.append(f"{path.relative_to(ROOT)}: {word}")
    assert not bad, bad
    assert os.path.isfile(os.path.join(ROOT, "docs", "design.md"))


def test_no_module_or_test_file_over_450_lines():
    """Small modules with one idea each: every Python or C source of the package, its
    tests (the simulator's parts included), scripts and benchmarks stays under 450 lines."""
    long = []
    for top in ("offload", "tests", "scripts", "bench", "examples"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".py", ".c", ".c.in", ".cpp")):
                    path = os.path.join(folder, name)
                    with open(path, encoding="utf-8") as f:
                        lines = sum(1 for _ in f)
                    if lines > 450:
                        long.append(f"{os.path.relpath(path, ROOT)}: {lines} lines")
    assert long == []
