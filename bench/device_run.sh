#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one script run on a lent GPU node (16 cores), from the repository root:
#
#   bench/device_run.sh WHEEL_DIR [OUT]     (OUT defaults to $OUT, else /tmp/device_out)
#
# Installs the dlfeed wheel from WHEEL_DIR into /tmp/site (no network, no
# dependencies: torch, h5py and numpy come from the machine), then runs, one
# after the other so they do not share the cores:
#   bench/gpu_feed.py      (issue 28: batches delivered to the GPU)  -> OUT/gpu_feed.{json,md,log}
#   bench/node_scaling.py  (issue 29: defaults against hand-set engines/threads) -> OUT/node_scaling.{json,md,log}
# plus OUT/env.txt. At most 8 files come back, all at the top of OUT; the data
# lives under /tmp. Each part has its own time limit (GPU_S, NODE_S seconds);
# GPU_ARGS and NODE_ARGS add options to each (e.g. GPU_ARGS="--cases au,au_inline
# --seconds 3", NODE_ARGS="--groups A,E --rounds 1"), for a short device budget.
set -uo pipefail
WHEELS=${1:?usage: bench/device_run.sh WHEEL_DIR [OUT]}
OUT=${2:-${OUT:-/tmp/device_out}}
PY=${PYTHON:-python3}
GPU_S=${GPU_S:-270}
NODE_S=${NODE_S:-200}
mkdir -p "$OUT"
rm -rf /tmp/site
"$PY" -m pip install --quiet --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
{
  date -u; nproc; free -g | head -2
  nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1 || true
  "$PY" -c 'import dlfeed, torch, numpy, h5py; print("dlfeed", dlfeed.__version__, dlfeed.__file__, "torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__, "h5py", h5py.__version__)'
} 2>&1 | tee "$OUT/env.txt"
rc=0
timeout "$GPU_S" "$PY" bench/gpu_feed.py "$OUT" --data /tmp/gf28 ${GPU_ARGS:-} > "$OUT/gpu_feed.log" 2>&1 || rc=$?
echo "gpu_feed.py exit status $rc" | tee -a "$OUT/gpu_feed.log"
tail -40 "$OUT/gpu_feed.log"
rc2=0
timeout "$NODE_S" "$PY" bench/node_scaling.py --out "$OUT" --data /tmp/ns ${NODE_ARGS:-} > "$OUT/node_scaling.log" 2>&1 || rc2=$?
echo "node_scaling.py exit status $rc2" | tee -a "$OUT/node_scaling.log"
tail -40 "$OUT/node_scaling.log"
cat "$OUT/gpu_feed.md" "$OUT/node_scaling.md" 2>/dev/null | tail -60
exit $(( rc || rc2 ))
