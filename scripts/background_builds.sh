#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The builds that scripts/test.sh's later phases use, one after another:
#   wheel  the self-contained wheel that tests/python/packaging/test_wheel.py installs
#          (build/test-cache/wheel; that test's own scripts/wheel.sh run then finds it built)
#   asan   build-asan/ (ASan+UBSan), tests only
#   tsan   build-tsan/ (TSan), tests only
#   fuzz   build-fuzz/, the libFuzzer targets (scripts/fuzz.sh builds, runs none)
#   scripts/background_builds.sh LOG_DIR
# For each build, LOG_DIR/<name>.log is its output and LOG_DIR/<name>.rc its exit
# status, written when it ends. scripts/test.sh starts this at the lowest CPU
# priority while its own checks, ctest and pytest run, and waits for each .rc
# before the phase that needs it. Follows DLFEED_TEST_WHEEL=0,
# DLFEED_SKIP_SANITIZERS=1 and DLFEED_SKIP_FUZZ=1 as scripts/test.sh does.
set -uo pipefail
cd "$(dirname "$0")/.."
# setsid (scripts/test.sh) made this a session, and with the scheduler's
# autogroups (sched_autogroup_enabled) a session shares the CPU with the
# others as a whole, whatever its processes' nice: its autogroup gets nice 19 too.
echo 19 >/proc/self/autogroup 2>/dev/null || true
# Builds of cores-many jobs (ninja's default is more), beside pytest's.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
LOGS=${1:?usage: scripts/background_builds.sh LOG_DIR}
mkdir -p "$LOGS"

build() {  # name, command...
  local name=$1 rc=0
  shift
  "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$LOGS/$name.rc.tmp" && mv "$LOGS/$name.rc.tmp" "$LOGS/$name.rc"
}

if [ "${DLFEED_TEST_WHEEL:-1}" != 0 ]; then
  # As test_wheel.py runs it: this Python, that folder, no paths into build/.
  build wheel env -u DLFEED_BIN -u PYTHONPATH PYTHON="$(pwd -P)/.venv/bin/python" \
    BUILD_DIR="$(pwd -P)/build/test-cache/wheel/build" scripts/wheel.sh "$(pwd -P)/build/test-cache/wheel/dist"
fi
if [ "${DLFEED_SKIP_SANITIZERS:-0}" != 1 ]; then
  # Tests only (no tools, examples or benches), line tables rather than full
  # debug info (-g1: reports still name file and line).
  build asan env BUILD_DIR=build-asan CMAKE_ARGS="-DDLFEED_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug -DDLFEED_LINE_TABLES_ONLY=ON -DDLFEED_BUILD_BENCH=OFF -DDLFEED_BUILD_EXAMPLES=OFF -DDLFEED_BUILD_TOOLS=OFF" \
    scripts/setup.sh
  # No MPI here: ThreadSanitizer needs every library instrumented and Open
  # MPI's is not; the MPI tests run in build/ and under ASan.
  build tsan env BUILD_DIR=build-tsan CMAKE_ARGS="-DDLFEED_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug -DDLFEED_LINE_TABLES_ONLY=ON -DDLFEED_BUILD_BENCH=OFF -DDLFEED_BUILD_EXAMPLES=OFF -DDLFEED_BUILD_TOOLS=OFF -DDLFEED_MPI=OFF" \
    scripts/setup.sh
fi
if [ "${DLFEED_SKIP_FUZZ:-0}" != 1 ]; then
  build fuzz env DLFEED_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh
fi
