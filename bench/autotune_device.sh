#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Autotune on against off (and hand-set engines) on a lent many-core node:
#
#   bench/autotune_device.sh [LABEL=]WHEEL_DIR[,[LABEL=]WHEEL_DIR...] [OUT] [ROUNDS] [EPOCHS]
#
# Installs each dlfeed wheel into its own folder under $SITE (/tmp/at_site; no
# network), writes 16,384 HDF5 samples of 3x224x224 uint8 (147 KiB, 4 files,
# warm: just written) under $DATA (/tmp/at; SAMPLES per file, 4096), then runs
# `dlfeed run` (global shuffle, batch 256, read not held) with --autotune off /
# on / off with --io_engines 16, for each wheel in turn, ROUNDS rounds; prints
# one line a run (the wheel's label, rate over epochs 1.., engines at the end,
# autotune changes, the prefetch at the end) to OUT/autotune.txt. Two wheels
# (e.g. base=build-wheel/base,new=build-wheel/dist) compare builds side by side.
set -uo pipefail
SPECS=${1:?usage: bench/autotune_device.sh [LABEL=]WHEEL_DIR[,...] [OUT] [ROUNDS] [EPOCHS]}
OUT=${2:-${OUT:-/tmp/autotune_out}}
ROUNDS=${3:-5}
EPOCHS=${4:-12}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/at_site}
DATA=${DATA:-/tmp/at}
mkdir -p "$OUT"
rm -rf "$SITE"
LABELS=()
IFS=, read -ra PARTS <<< "$SPECS"
for spec in "${PARTS[@]}"; do
  label=${spec%%=*}; dir=${spec#*=}
  [ "$label" = "$spec" ] && label=$(basename "$dir")
  "$PY" -m pip install --quiet --no-index --no-deps --target "$SITE/$label" "$dir"/*.whl || exit 1
  [ -x "$SITE/$label/dlfeed/bin/dlfeed" ] || { echo "no dlfeed command in $dir's wheel"; exit 1; }
  LABELS+=("$label")
done
exec > >(tee "$OUT/autotune.txt") 2>&1
date -u; nproc
[ -d "$DATA" ] || "$SITE/${LABELS[0]}/dlfeed/bin/dlfeed" generate --format hdf5 --files 4 \
  --samples-per-file ${SAMPLES:-4096} --shape 3,224,224 --dtype uint8 --dir "$DATA"
run() {  # LABEL NAME FLAGS...
  local label=$1 name=$2; shift 2
  "$SITE/$label/dlfeed/bin/dlfeed" run --quiet --strategy global_shuffle --epochs "$EPOCHS" --fields records,labels \
    --batch-size 256 --resident off --summary-json /tmp/at_s.json "$@" "$DATA" > /dev/null 2>&1 \
    || { echo "$label $name failed"; return; }
  "$PY" - "$label" "$name" <<'PY'
import json, sys
d = json.load(open("/tmp/at_s.json"))["run"]
rs = [e["samples_per_s"] for e in d["epochs"][1:]]
print(sys.argv[1], sys.argv[2], round(len(rs) / sum(1 / x for x in rs)), "engines", d["io_engines"], "threads",
      d["threads"], "changes", d["autotune_changes"], d["prefetch"], flush=True)
PY
}
for r in $(seq "$ROUNDS"); do
  for label in "${LABELS[@]}"; do
    run "$label" off --autotune off
    run "$label" on --autotune on
    run "$label" engines16 --autotune off --io_engines 16
  done
done
