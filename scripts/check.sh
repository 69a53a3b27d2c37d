#!/usr/bin/env bash
# Every check CI runs, in the project's venv: lint, types, layers, docs, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
"$py" -m ruff check offload examples/plugin_template
"$py" -m mypy offload examples/plugin_template/offload_template_plugin
"$py" scripts/check_layers.py
# strict, and loud: --quiet would drop the warnings strict mode counts (a check that cannot fail)
"$py" -m mkdocs build --strict --site-dir "$(mktemp -d)" 2>&1 | { grep -v "^INFO" || true; }
# the whole suite against both mapping cores, as CPython tests its C accelerators: the
# compiled one (offload/accel_c), then its pure-Python twin (tests/conftest.py: ACCEL)
"$py" -m pytest -q "$@"
OFFLOAD_ACCEL=0 "$py" -m pytest -q "$@"
