#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The quick checks, before a commit (under a minute): the C++ format
# (clang-format), Python lint (ruff) and types (mypy) of python/dlfeed, as
# configured in pyproject.toml, no include in src/ that climbs out of its
# stage's view (../), the SPDX line on every owned source file, and
# clang-tidy (.clang-tidy) on the src/*.cc files changed since the branch left
# TIDY_BASE (default origin/main; at most TIDY_MAX files, default 3): the whole
# of src/ takes 11 to 14 minutes on 2 cores, so it is one command away
# instead (scripts/tidy.sh).
# scripts/test.sh runs it first; scripts/setup.sh installs ruff, mypy and clang-tidy-14.
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
echo "== clang-tidy (.clang-tidy) on the src/*.cc files changed since ${TIDY_BASE:-origin/main}"
if ! command -v clang-tidy-14 >/dev/null; then
  echo "skipped: clang-tidy-14 is not installed (scripts/setup.sh installs it)"
elif ! base=$(git merge-base HEAD "${TIDY_BASE:-origin/main}" 2>/dev/null); then
  echo "skipped: no ${TIDY_BASE:-origin/main} to compare with (set TIDY_BASE); all of src/: scripts/tidy.sh"
else
  mapfile -t changed < <({ git diff --name-only --diff-filter=d "$base" -- 'src/*.cc'
                           git ls-files --others --exclude-standard -- 'src/*.cc'; } | sort -u)
  if ((${#changed[@]} == 0)); then
    echo "no src/*.cc file changed; all of src/: scripts/tidy.sh"
  elif ((${#changed[@]} > ${TIDY_MAX:-3})); then
    echo "skipped: ${#changed[@]} files changed, more than TIDY_MAX=${TIDY_MAX:-3} (10 s or more each);" \
      "run scripts/tidy.sh \$(git diff --name-only ${base:0:12} -- 'src/*.cc')"
  else
    scripts/tidy.sh "${changed[@]}" || status=1
  fi
fi
exit "$status"
