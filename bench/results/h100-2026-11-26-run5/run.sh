#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run 5 on a lent 16-core node, from the repository root, one call:
#   bash bench/results/h100-2026-11-26-run5/run.sh     (writes under $OUT)
# Carried (git-ignored): build-wheel/old (main at 1e4eeea: read-ahead 256 MiB,
# split regions apart), build-wheel/new (main at c2d47c7: 64 MiB per engine,
# overlapping regions, CRC chains beside the folds), build-wheel/crc (static
# CRC32C micro benchmarks: crc_old = the folds alone, crc_csN = the fused
# loop with N bytes a chain per step).
set -uo pipefail
OUT=${OUT:?}
PY=${PYTHON:-python3}
{ date -u; nproc; lscpu | grep -E "Model name|Flags" | cut -c1-300; free -g | head -2; } > "$OUT/env.txt" 2>&1
echo "== 1 CRC32C micro (GB/s, best of 5, one core)"
for b in old cs16 cs24 cs32 cs40; do echo "== $b"; timeout 60 build-wheel/crc/crc_$b; done > "$OUT/crc.txt" 2>&1
cat "$OUT/crc.txt"
for w in old new; do
  rm -rf "/tmp/kn_$w"
  "$PY" -m pip install -q --no-index --no-deps --target "/tmp/kn_$w" build-wheel/$w/*.whl || exit 1
done
for f in tfrecord hdf5; do
  /tmp/kn_new/dlfeed/bin/dlfeed generate --dir /tmp/p/$f --format $f --files 4 --samples-per-file 512 \
    --shape 3,224,224 --dtype uint8 --seed 7 > /dev/null || exit 1
done
"$PY" -c 'import sys; sys.path.insert(0, "bench"); import _benchlib as bl; bl.evict(sys.argv[1:]); bl.warm(sys.argv[1:])' /tmp/p/tfrecord /tmp/p/hdf5
echo "== 2 dlfeed run defaults, old against new wheel (30 epochs, rate over epochs 1.., peak RSS)"
run() {  # NAME WHEEL DIR FIELDS FLAGS...
  local name=$1 w=$2 dir=$3 fields=$4; shift 4
  timeout 60 /tmp/kn_$w/dlfeed/bin/dlfeed run --quiet --strategy global_shuffle --epochs 30 --fields "$fields" \
    --batch-size 256 --resident off --summary-json /tmp/s5.json "$@" "$dir" > /dev/null 2>&1 || { echo "$name failed"; return; }
  "$PY" - "$name" <<'PY'
import json, sys
d = json.load(open("/tmp/s5.json"))["run"]
rs = [e["samples_per_s"] for e in d["epochs"][1:]]
rss = max(e.get("rss_bytes", 0) for e in d["epochs"])
print(sys.argv[1], round(len(rs) / sum(1 / x for x in rs)), "engines", d["io_engines"], "threads", d["threads"],
      "prefetch", d["prefetch"], "rss_MB", rss >> 20)
PY
}
for r in $(seq "${ROUNDS:-5}"); do
  for w in old new; do
    run "h5_$w" $w /tmp/p/hdf5 records,labels
    run "tf_$w" $w /tmp/p/tfrecord image,label
  done
  run tf_new_nocrc new /tmp/p/tfrecord image,label --no-verify-crc
done | tee "$OUT/defaults.txt"
"$PY" - "$OUT/defaults.txt" <<'PY' | tee -a "$OUT/defaults.txt"
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) > 1 and p[1].isdigit():
        by.setdefault(p[0], []).append(int(p[1]))
for name, v in by.items():
    h5 = statistics.median(by["h5_" + ("old" if name.endswith("old") else "new")])
    print(f"median {name}: {statistics.median(v):,.0f} ({statistics.median(v) / h5:.2f} of that wheel's hdf5) {v}")
PY
echo "== 3 node_scaling groups A and E, old and new"
timeout 300 bash bench/node_scaling_ab.sh old=build-wheel/old,new=build-wheel/new "$OUT/ns" --groups A,E --rounds "${NS_ROUNDS:-3}" ${NS_ARGS:-}
