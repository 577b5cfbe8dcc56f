#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one script to run on a lent GPU machine, from the repository root:
#
#   bench/gpu_device_run.sh WHEEL_DIR [OUT]      (OUT defaults to $OUT, else /tmp/gpu_out)
#
# Installs the dlfeed wheel from WHEEL_DIR into /tmp/site (no network, no
# dependencies: torch, h5py and numpy come from the machine), runs
# bench/gpu_feed.py into OUT (gpu_feed.json, gpu_feed.md) and keeps its
# output in OUT/gpu_feed.log. Under 5 minutes with the data generation.
set -uo pipefail
WHEELS=${1:?usage: bench/gpu_device_run.sh WHEEL_DIR [OUT]}
OUT=${2:-${OUT:-/tmp/gpu_out}}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
rm -rf /tmp/site
"$PY" -m pip install --quiet --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site
{
  nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1 || true
  "$PY" -c 'import dlfeed, torch; print("dlfeed", dlfeed.__file__, "torch", torch.__version__, "cuda", torch.cuda.is_available())'
} 2>&1 | tee "$OUT/env.txt"
timeout 290 "$PY" bench/gpu_feed.py "$OUT" 2>&1 | tee "$OUT/gpu_feed.log"
rc=${PIPESTATUS[0]}
echo "gpu_feed.py exit status $rc" | tee -a "$OUT/gpu_feed.log"
exit "$rc"
