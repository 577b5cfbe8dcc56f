#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run 8 on a lent 16-core node, from the repository root, one call:
#   bash bench/results/h100-2026-11-26-run8/run.sh     (writes under $OUT)
# Carried (git-ignored): build-wheel/final (run 7's wheel, 7636703) and
# build-wheel/final2 (313d52c: the autotuner also moves the decode threads).
set -uo pipefail
OUT=${OUT:?}
PY=${PYTHON:-python3}
timeout 130 bash bench/autotune_device.sh final=build-wheel/final,final2=build-wheel/final2 "$OUT" \
  "${AT_ROUNDS:-3}" "${AT_EPOCHS:-40}" > "$OUT/autotune.log" 2>&1 || tail -5 "$OUT/autotune.log"
cat "$OUT/autotune.txt"
rm -rf /tmp/site
"$PY" -m pip install -q --no-index --no-deps --target /tmp/site build-wheel/final2/*.whl || exit 1
PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 90 "$PY" bench/node_scaling.py --out "$OUT/ns" --data /tmp/ns \
  --groups A,C --rounds 1 ${NS_ARGS:-} > "$OUT/ns.log" 2>&1 || tail -5 "$OUT/ns.log"
rm -f "$OUT/ns/node_scaling.json"
cat "$OUT/ns/node_scaling.md"
