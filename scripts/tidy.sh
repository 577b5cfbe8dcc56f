#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs clang-tidy-14 (.clang-tidy at the top) over dlfeed's sources in src/,
# or over the files named, in parallel; exits 1 on any finding. Headers of
# src/ are checked through the .cc files that include them. tools/, tests/
# and bench/ are not checked by default (a file of theirs may be named).
# The compile database is build-tidy/ (configured here when missing or older
# than the CMake files; never built): each stage of src/ compiles against its
# view build-tidy/layers/<stage>/, made at configure time.
#   scripts/tidy.sh                     # all of src/*.cc (11 to 14 min on 2 cores)
#   scripts/tidy.sh src/io/file.cc ...  # these files, e.g. the ones a change touches:
#   scripts/tidy.sh $(git diff --name-only origin/main -- 'src/*.cc')
# Environment: CLANG_TIDY (the binary), TIDY_BUILD_DIR (default build-tidy),
# TIDY_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
CT=${CLANG_TIDY:-$(command -v clang-tidy-14 || command -v clang-tidy || true)}
if [ -z "$CT" ]; then
  echo "tidy.sh: clang-tidy not found (apt-get install clang-tidy-14; scripts/setup.sh installs it)" >&2
  exit 2
fi
BUILD=${TIDY_BUILD_DIR:-build-tidy}

if (($#)); then
  files=()
  for f in "$@"; do
    case "$f" in
      *.cc | *.cpp) [ -f "$f" ] && files+=("$f") || echo "tidy: skipping $f (not a file)" ;;
      *) echo "tidy: skipping $f (headers are checked through the .cc files that include them)" ;;
    esac
  done
else
  mapfile -t files < <(git ls-files 'src/*.cc')
fi
if ((${#files[@]} == 0)); then
  echo "tidy: no files to check"
  exit 0
fi

db="$BUILD/compile_commands.json"
if [ ! -f "$db" ] || [ -n "$(find CMakeLists.txt cmake -newer "$db" -print -quit)" ]; then
  echo "tidy: configuring $BUILD (the compile database; nothing is built)"
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DDLFEED_BUILD_TESTS=OFF \
    -DDLFEED_BUILD_BENCH=OFF -DDLFEED_BUILD_EXAMPLES=OFF -DDLFEED_BUILD_PYTHON=OFF >/dev/null
  touch "$db"
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "tidy: ${#files[@]} files with $("$CT" --version | grep -o 'version [0-9.]*'), ${TIDY_JOBS:-$(nproc)} at a time"
status=0
# One clang-tidy per file; each prints its findings in one piece when done
# (without the "N warnings generated" lines about code outside the filter).
printf '%s\0' "${files[@]}" | xargs -0 -P"${TIDY_JOBS:-$(nproc)}" -I{} sh -c '
  log="$3/$(printf "%s" "$4" | tr / _).log"
  "$1" -p "$2" --quiet "$4" >"$log" 2>&1; rc=$?
  grep -Ev "^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$" "$log" || true
  exit $rc' sh "$CT" "$BUILD" "$out" {} || status=1

# The same finding in a header is reported once per file that includes it.
findings=$(cat "$out"/*.log | { grep -E ': (warning|error): .*\[[a-z0-9.,-]+\]$' || true; } |
  sed -E 's#/layers/[a-z_]+/#/src/#' | sort -u | wc -l)
if [ "$status" != 0 ]; then
  echo "tidy: $findings findings (or errors above) in ${#files[@]} files"
else
  echo "tidy: ${#files[@]} files clean"
fi
exit "$status"
