#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Formats dlfeed's C++ with clang-format (.clang-format at the top), or with
# --check lists the files that are not formatted and exits 1.
#   scripts/format.sh           # rewrite in place
#   scripts/format.sh --check   # scripts/test.sh runs this
set -euo pipefail
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$CF" ]; then
  echo "format.sh: clang-format not found (apt-get install clang-format-14)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cpp' | grep -E '^(include|src|tools|bindings|tests|bench|examples)/')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$CF" --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "not formatted: $f (scripts/format.sh rewrites it)"
      bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "format: ${#files[@]} files formatted ($("$CF" --version))"
  exit "$bad"
fi
"$CF" -i "${files[@]}"
