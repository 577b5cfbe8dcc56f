#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: ctest (C++), pytest
# (interop with numpy, h5py, TensorFlow), and the format tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== ctest (build/)"
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== pytest"
export TF_CPP_MIN_LOG_LEVEL=2
DLFEED_BIN="$PWD/build/tools/dlfeed" .venv/bin/python -m pytest -q tests/python

if [ "${DLFEED_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== ctest under ASan+UBSan (build-asan/)"
  BUILD_DIR=build-asan CMAKE_ARGS="-DDLFEED_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug -DDLFEED_BUILD_BENCH=OFF" \
    scripts/setup.sh
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -LE package
fi
