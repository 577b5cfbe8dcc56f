#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up (scripts/setup.sh), runs the quick checks (scripts/check.sh: C++ format,
# Python lint and types, SPDX lines),
# then runs every test: ctest (C++), pytest
# (interop with numpy, h5py, TensorFlow, and the command line), the C++ suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer and again under
# ThreadSanitizer (fault injection, staging and the short soak included), then
# fuzzes every parser for a bounded time (scripts/fuzz.sh; docs/reliability.md).
# With Open MPI installed (setup.sh installs it) ctest includes the mpirun
# tests (label mpi).
# DLFEED_SKIP_SANITIZERS=1 skips the two sanitizer builds, DLFEED_SKIP_FUZZ=1
# the fuzzing; DLFEED_FUZZ_SECONDS (default 30) is the time per fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed as it ends and again at the end (CI shows
# the tail of this output): where the suite's time goes.
PHASES=()
phase_start=$SECONDS
phase_name="setup (apt, .venv, build/)"
phase() {
  local took=$((SECONDS - phase_start))
  PHASES+=("$(printf '%5d s  %s' "$took" "$phase_name")")
  echo "-- $phase_name: ${took} s"
  phase_name=$1
  phase_start=$SECONDS
  echo "== $1"
}
report_phases() {
  phase "end"
  echo "== time per phase (total ${SECONDS} s)"
  printf '%s\n' "${PHASES[@]}"
}
trap report_phases EXIT
echo "== machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
# The ten slowest tests of a ctest run (its log of the last run).
slowest_ctest() {
  local log=$1/Testing/Temporary/LastTest.log
  [ -f "$log" ] || return 0
  echo "-- slowest in $1:"
  awk -F'"' '/^[0-9]+\/[0-9]+ Testing: /{name=$0; sub(/^[0-9]+\/[0-9]+ Testing: /,"",name)}
             /^Test time = /{split($0,a,"= "); t=a[2]+0; printf "%8.2f s  %s\n", t, name}' "$log" |
    sort -rn | head -10 || true  # head's early exit is sort's SIGPIPE under pipefail
}
# Warnings are errors in dlfeed's own targets here, and debug info is line
# tables only (-g1: the builds are most of the suite's time) (a build
# configured by this command; an existing build/ keeps its settings).
CMAKE_ARGS="-DDLFEED_WERROR=ON -DDLFEED_LINE_TABLES_ONLY=ON ${CMAKE_ARGS:-}" scripts/setup.sh

# Format, Python lint and types, SPDX lines (scripts/check.sh).
phase "checks (scripts/check.sh)"
scripts/check.sh

phase "ctest (build/)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
slowest_ctest build

phase "pytest"
export TF_CPP_MIN_LOG_LEVEL=2
# The Python package in-tree: pure Python from python/, the _dlfeed extension
# that CMake built into build/python/dlfeed/ (no pip install needed).
if ! ls build/python/dlfeed/_dlfeed*.so >/dev/null 2>&1; then
  echo "test: build/python/dlfeed/_dlfeed*.so is missing (pybind11 not found by CMake?)" >&2
  exit 1
fi
DLFEED_BIN="$PWD/build/tools/dlfeed" PYTHONPATH="$PWD/python:$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" \
  .venv/bin/python -m pytest -q --durations=15 tests/python

if [ "${DLFEED_SKIP_SANITIZERS:-0}" != 1 ]; then
  phase "build-asan/ (ASan+UBSan)"
  # Tests only (no tools, examples or benches), line tables rather than full
  # debug info (-g1: reports still name file and line): CI's time goes to
  # compiling, twice over for the two sanitizers.
  BUILD_DIR=build-asan CMAKE_ARGS="-DDLFEED_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug -DDLFEED_LINE_TABLES_ONLY=ON -DDLFEED_BUILD_BENCH=OFF -DDLFEED_BUILD_EXAMPLES=OFF -DDLFEED_BUILD_TOOLS=OFF" \
    scripts/setup.sh
  phase "ctest under ASan+UBSan (build-asan/)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -LE package
  slowest_ctest build-asan

  # No MPI here: ThreadSanitizer needs every library instrumented and Open
  # MPI's is not; the MPI tests run in build/ and under ASan.
  phase "build-tsan/ (TSan)"
  BUILD_DIR=build-tsan \
    CMAKE_ARGS="-DDLFEED_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug -DDLFEED_LINE_TABLES_ONLY=ON -DDLFEED_BUILD_BENCH=OFF -DDLFEED_BUILD_EXAMPLES=OFF -DDLFEED_BUILD_TOOLS=OFF -DDLFEED_MPI=OFF" \
    scripts/setup.sh
  phase "ctest under TSan (build-tsan/)"
  TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -j"$(nproc)" -LE package
  slowest_ctest build-tsan
fi

if [ "${DLFEED_SKIP_FUZZ:-0}" != 1 ]; then
  phase "fuzz (build-fuzz/, clang + libFuzzer, ${DLFEED_FUZZ_SECONDS:-30} s per target)"
  scripts/fuzz.sh
fi
