#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up (scripts/setup.sh), runs the quick checks (scripts/check.sh: C++ format,
# Python lint and types, SPDX lines),
# then runs every test: ctest of build/ (the package and MPI tests), pytest
# (interop with numpy, h5py, TensorFlow, and the command line), the C++ unit
# tests under AddressSanitizer + UndefinedBehaviorSanitizer and under
# ThreadSanitizer (fault injection, staging and the short soak included), then
# fuzzes every parser for a bounded time (scripts/fuzz.sh; docs/reliability.md).
# With Open MPI installed (setup.sh installs it) ctest includes the mpirun
# tests (label mpi).
# The wheel, the sanitizer and the fuzz builds run in the background at the
# lowest CPU priority from the start (scripts/background_builds.sh; their logs
# in build/ci-logs/): they take the cores that the checks, ctest and pytest
# leave idle, and each later phase waits for its build.
# DLFEED_SKIP_SANITIZERS=1 skips the two sanitizer builds, DLFEED_SKIP_FUZZ=1
# the fuzzing, DLFEED_TEST_WHEEL=0 the wheel; DLFEED_FUZZ_SECONDS (default 15)
# is the time per fuzz target.
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
# tables only (-g1: the builds are most of the suite's time). The C++ unit
# tests are not built in build/: they run under the two sanitizers below,
# and build/ serves pytest and the package and MPI tests (a build configured
# by this command; an existing build/ keeps its settings).
CMAKE_ARGS="-DDLFEED_WERROR=ON -DDLFEED_LINE_TABLES_ONLY=ON -DDLFEED_UNIT_TESTS=OFF ${CMAKE_ARGS:-}" scripts/setup.sh

LOGS=build/ci-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
# In a session of its own (its process group is its pid), so that an early
# exit here stops it and every compiler it started.
setsid nice -n 19 scripts/background_builds.sh "$LOGS" &
BUILDS_PID=$!
stop_builds() {
  kill -0 "$BUILDS_PID" 2>/dev/null && kill -TERM -- "-$BUILDS_PID" 2>/dev/null
  return 0
}
# Waits for background build $1; on its failure, its log's end and exit.
wait_for_build() {
  local name=$1
  while [ ! -f "$LOGS/$name.rc" ]; do
    if ! kill -0 "$BUILDS_PID" 2>/dev/null && [ ! -f "$LOGS/$name.rc" ]; then
      echo "test: the background builds (scripts/background_builds.sh) ended without building $name" >&2
      exit 1
    fi
    sleep 1
  done
  if [ "$(cat "$LOGS/$name.rc")" != 0 ]; then
    echo "test: the $name build failed; the end of $LOGS/$name.log:" >&2
    tail -n 80 "$LOGS/$name.log" >&2
    exit 1
  fi
  echo "-- $name build: done (log $LOGS/$name.log)"
}
trap 'stop_builds; report_phases' EXIT

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
  phase "waiting for build-asan/ (ASan+UBSan)"
  wait_for_build asan
  phase "ctest under ASan+UBSan (build-asan/)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -LE package
  slowest_ctest build-asan

  phase "waiting for build-tsan/ (TSan)"
  wait_for_build tsan
  phase "ctest under TSan (build-tsan/)"
  TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -j"$(nproc)" -LE package
  slowest_ctest build-tsan
fi

if [ "${DLFEED_SKIP_FUZZ:-0}" != 1 ]; then
  phase "waiting for build-fuzz/"
  wait_for_build fuzz
  phase "fuzz (build-fuzz/, clang + libFuzzer, ${DLFEED_FUZZ_SECONDS:-15} s per target)"
  scripts/fuzz.sh
fi
