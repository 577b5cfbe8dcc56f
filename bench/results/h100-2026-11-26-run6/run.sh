#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run 6 on a lent 16-core node, from the repository root, one call:
#   bash bench/results/h100-2026-11-26-run6/run.sh     (writes under $OUT)
# Carried (git-ignored): build-wheel/new (main at c2d47c7: engines cores / 2)
# and build-wheel/new2 (engines one per core, CRC chains only on AMD).
# taskset gives node_scaling a 4- and an 8-core machine's affinity, which
# dlfeed's defaults follow.
set -uo pipefail
OUT=${OUT:?}
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-2}
date -u > "$OUT/env.txt"; nproc >> "$OUT/env.txt"
for w in new new2; do
  rm -rf "/tmp/kn_$w"
  "$PY" -m pip install -q --no-index --no-deps --target "/tmp/kn_$w" build-wheel/$w/*.whl || exit 1
done
for c in 16 8 4; do
  echo "== A on $c cores (new2)"
  PYTHONPATH=/tmp/kn_new2 PYTHONUNBUFFERED=1 timeout 150 taskset -c 0-$((c - 1)) "$PY" bench/node_scaling.py \
    --out "$OUT/a$c" --data /tmp/ns --groups A --rounds "$ROUNDS" ${NS_ARGS:-} > "$OUT/a$c.log" 2>&1 || tail -5 "$OUT/a$c.log"
  grep -A10 "### A" "$OUT/a$c/node_scaling.md"
done
echo "== D and E on 16 cores (new2)"
PYTHONPATH=/tmp/kn_new2 PYTHONUNBUFFERED=1 timeout 150 "$PY" bench/node_scaling.py --out "$OUT/de" --data /tmp/ns \
  --groups D,E --rounds "$ROUNDS" ${NS_ARGS:-} > "$OUT/de.log" 2>&1 || tail -5 "$OUT/de.log"
grep -A12 "### [DE]" "$OUT/de/node_scaling.md"
rm -f "$OUT"/a*/node_scaling.json "$OUT"/de/node_scaling.json
for f in tfrecord hdf5; do
  /tmp/kn_new2/dlfeed/bin/dlfeed generate --dir /tmp/p/$f --format $f --files 4 --samples-per-file 512 \
    --shape 3,224,224 --dtype uint8 --seed 7 > /dev/null || exit 1
done
"$PY" -c 'import sys; sys.path.insert(0, "bench"); import _benchlib as bl; bl.evict(sys.argv[1:]); bl.warm(sys.argv[1:])' /tmp/p/tfrecord /tmp/p/hdf5
echo "== dlfeed run defaults, new against new2 (30 epochs, rate over epochs 1..)"
run() {  # NAME WHEEL DIR FIELDS
  timeout 60 /tmp/kn_$2/dlfeed/bin/dlfeed run --quiet --strategy global_shuffle --epochs 30 --fields "$4" \
    --batch-size 256 --resident off --summary-json /tmp/s6.json "$3" > /dev/null 2>&1 || { echo "$1 failed"; return; }
  "$PY" - "$1" <<'PY'
import json, sys
d = json.load(open("/tmp/s6.json"))["run"]
rs = [e["samples_per_s"] for e in d["epochs"][1:]]
print(sys.argv[1], round(len(rs) / sum(1 / x for x in rs)), "engines", d["io_engines"], "threads", d["threads"],
      "prefetch", d["prefetch"], "autotune_changes", d["autotune_changes"])
PY
}
for r in $(seq 3); do
  for w in new new2; do
    run "h5_$w" $w /tmp/p/hdf5 records,labels
    run "tf_$w" $w /tmp/p/tfrecord image,label
  done
done | tee "$OUT/defaults.txt"
