#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The quick checks, before a commit (under a minute): the C++ format
# (clang-format), Python lint (ruff) and types (mypy) of python/dlfeed, as
# configured in pyproject.toml, no include in src/ that climbs out of its
# stage's view (../), and the SPDX line on every owned source file.
# scripts/test.sh runs it first; scripts/setup.sh installs ruff and mypy into .venv.
#   scripts/check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
status=0
echo "== C++ format (.clang-format)"
scripts/format.sh --check || status=1
echo "== ruff (pyproject.toml [tool.ruff])"
"$PY" -m ruff check python/dlfeed || status=1
echo "== mypy (pyproject.toml [tool.mypy])"
"$PY" -m mypy || status=1
echo "== includes in src/ name their stage's folder, never ../ (cmake/dlfeed_stages.cmake)"
if grep -rnE '^#include "\.\./' src; then status=1; fi
echo "== SPDX lines"
"$PY" scripts/spdx.py --check || status=1
exit "$status"
