#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fuzzes every parser dlfeed owns (tests/fuzz, docs/reliability.md): builds
# the libFuzzer targets with clang + ASan + UBSan into build-fuzz/, writes seed
# corpora with numpy, h5py, TensorFlow and dlfeed's generator, then runs each
# target for DLFEED_FUZZ_SECONDS (default 15), DLFEED_FUZZ_JOBS (default 2)
# targets at a time. Fails on any finding (crash, sanitizer report, violated
# property, timeout, out of memory), leaving the input in
# build-fuzz/findings/<target>/; add it to tests/fuzz/regressions/<target>/ with
# the fix. New inputs that found coverage stay in build-fuzz/corpus/<target>/ and
# seed the next run.
#   scripts/fuzz.sh                        # all targets, 15 s each (CI)
#   DLFEED_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh   # build the targets, run none
#   DLFEED_FUZZ_SECONDS=3600 scripts/fuzz.sh npz hdf5   # by hand: an hour each
# Needs clang and libFuzzer (Debian: clang, libclang-rt-14-dev; installed here
# when missing) and .venv from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${DLFEED_FUZZ_SECONDS:-15}
JOBS=${DLFEED_FUZZ_JOBS:-2}
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(npy npz tfrecord tfrecord_idx example hdf5 index_cache indexed_binary deflate)

missing=()
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

B=build-fuzz
if [ ! -f "$B/CMakeCache.txt" ]; then
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DDLFEED_LINE_TABLES_ONLY=ON -DDLFEED_FUZZ=ON \
    -DDLFEED_SANITIZE=address,undefined \
    -DDLFEED_BUILD_TOOLS=OFF -DDLFEED_BUILD_EXAMPLES=OFF -DDLFEED_BUILD_BENCH=OFF -DDLFEED_BUILD_PYTHON=OFF \
    -DDLFEED_INSTALL=OFF >/dev/null
fi
cmake --build "$B" -j"$(nproc)" --target "${TARGETS[@]/#/fuzz_}"
[ "${DLFEED_FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

# Seeds from the real writers (and dlfeed's generator when it is built).
rm -rf "$B/seeds"
TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python tests/fuzz/make_seeds.py "$B/seeds" --dlfeed build/tools/dlfeed >/dev/null

run_one() {
  local t=$1
  local corpus="$B/corpus/$t" findings="$B/findings/$t" log="$B/logs/$t.log"
  mkdir -p "$corpus" "$findings" "$B/logs" "$B/seeds/$t"
  local regress=()
  [ -d "tests/fuzz/regressions/$t" ] && regress=("tests/fuzz/regressions/$t")
  # libhdf5 (not ours, not instrumented) keeps allocations across failed opens: no leak checks there.
  # index_cache writes and indexes HDF5 files too.
  local leaks=1; [ "$t" = hdf5 ] || [ "$t" = index_cache ] && leaks=0
  if ASAN_OPTIONS="detect_leaks=$leaks:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
     "$B/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" "$B/seeds/$t" "${regress[@]}" \
       >"$log" 2>&1; then
    echo "fuzz_$t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs, no finding"
  else
    echo "fuzz_$t: FINDING (log $log, input in $findings/):"
    grep -E "FUZZ FINDING|ERROR: |SUMMARY|runtime error" "$log" | head -5 | sed 's/^/  /'
    return 1
  fi
}

echo "fuzz: ${#TARGETS[@]} targets, ${SECONDS_EACH} s each, $JOBS at a time"
failed=0
pids=()
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  pids+=($!)
  if ((${#pids[@]} >= JOBS)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed
