#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Autotune on against off (and hand-set engines) on a lent many-core node:
#
#   bench/autotune_device.sh WHEEL_DIR [OUT] [ROUNDS] [EPOCHS]
#
# Installs the dlfeed wheel into $SITE (/tmp/at_site; no network), writes 16,384 HDF5
# samples of 3x224x224 uint8 (147 KiB, 4 files, warm: just written) under
# $DATA (/tmp/at; SAMPLES per file, 4096), then runs `dlfeed run` (global shuffle, batch 256, read not held)
# with --autotune off / on / off with --io_engines 16, alternating, ROUNDS
# rounds; prints one line a run (rate over epochs 1.., engines at the end,
# autotune changes, the prefetch at the end) to OUT/autotune.txt. The lent
# machine runs the main checkout: run it there once this is merged.
set -uo pipefail
WHEELS=${1:?usage: bench/autotune_device.sh WHEEL_DIR [OUT] [ROUNDS] [EPOCHS]}
OUT=${2:-${OUT:-/tmp/autotune_out}}
ROUNDS=${3:-5}
EPOCHS=${4:-12}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
rm -rf ${SITE:-/tmp/at_site}
"$PY" -m pip install --quiet --no-index --no-deps --target ${SITE:-/tmp/at_site} "$WHEELS"/*.whl || exit 1
BIN=$(ls ${SITE:-/tmp/at_site}/dlfeed/bin/dlfeed) || exit 1
exec > >(tee "$OUT/autotune.txt") 2>&1
date -u; nproc
[ -d ${DATA:-/tmp/at} ] || "$BIN" generate --format hdf5 --files 4 --samples-per-file ${SAMPLES:-4096} --shape 3,224,224 --dtype uint8 --dir ${DATA:-/tmp/at}
run() {  # NAME FLAGS...
  local name=$1; shift
  "$BIN" run --quiet --strategy global_shuffle --epochs "$EPOCHS" --fields records,labels --batch-size 256 \
    --resident off --summary-json /tmp/at_s.json "$@" ${DATA:-/tmp/at} > /dev/null 2>&1 || { echo "$name failed"; return; }
  "$PY" - "$name" <<'PY'
import json, sys
d = json.load(open("/tmp/at_s.json"))["run"]
rs = [e["samples_per_s"] for e in d["epochs"][1:]]
print(sys.argv[1], round(len(rs) / sum(1 / x for x in rs)), "engines", d["io_engines"], "threads", d["threads"],
      "changes", d["autotune_changes"], d["prefetch"], flush=True)
PY
}
for r in $(seq "$ROUNDS"); do
  run off --autotune off
  run on --autotune on
  run engines16 --autotune off --io_engines 16
done
