"""Item 3: every recipe of docs/recipes.md is a script that checks its own
results and prints PASS; each runs here, on the host plugin (and on a GPU machine on
its devices)."""
import os
import subprocess
import sys

import pytest

from tests.capi_support import WHY

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV = dict(os.environ,
           PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
RECIPES = sorted(f for f in os.listdir(os.path.join(ROOT, "examples", "recipes"))
                 if f.endswith(".py"))
NEEDS_CLANG = {"reduction.py", "one_kernel.py"}        # compile_openmp: clang-19


def test_the_recipes_page_names_every_recipe():
    page = open(os.path.join(ROOT, "docs", "recipes.md")).read()
    assert RECIPES and all(f"examples/recipes/{r}" in page for r in RECIPES), RECIPES
    assert "examples/prelock.py" in page


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_passes(recipe, tmp_path):
    if recipe in NEEDS_CLANG and WHY:
        pytest.skip(WHY)
    env = dict(ENV, OFFLOAD_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, os.path.join("examples", "recipes", recipe)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert res.returncode == 0 and res.stdout.rstrip().endswith("PASS"), \
        res.stdout + res.stderr
    res = subprocess.run([sys.executable, os.path.join("examples", "recipes", recipe),
                          "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env=env)
    assert res.returncode == 0 and "usage:" in res.stdout
