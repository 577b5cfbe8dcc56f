#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run 7 on a lent 16-core node, from the repository root, one call:
#   bash bench/results/h100-2026-11-26-run7/run.sh     (writes under $OUT)
# Carried (git-ignored): build-wheel/final, the end of the sixth round's main.
# Every node_scaling group once more (the 16-core targets), then
# autotune on against off.
set -uo pipefail
OUT=${OUT:?}
PY=${PYTHON:-python3}
rm -rf /tmp/site
"$PY" -m pip install -q --no-index --no-deps --target /tmp/site build-wheel/final/*.whl || exit 1
PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 240 "$PY" bench/node_scaling.py --out "$OUT/ns" --data /tmp/ns \
  --rounds "${ROUNDS:-2}" ${NS_ARGS:-} > "$OUT/ns.log" 2>&1 || tail -5 "$OUT/ns.log"
rm -f "$OUT/ns/node_scaling.json"
cat "$OUT/ns/node_scaling.md"
timeout 150 bash bench/autotune_device.sh final=build-wheel/final "$OUT" "${AT_ROUNDS:-3}" "${AT_EPOCHS:-40}" \
  > "$OUT/autotune.log" 2>&1 || tail -5 "$OUT/autotune.log"
cat "$OUT/autotune.txt"
