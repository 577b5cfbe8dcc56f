#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What holds TFRecord back against HDF5 on one machine: `dlfeed run` (global
# shuffle, batch 256, read not held) over the same samples stored both ways,
# with the TFRecord run's knobs turned one at a time:
#
#   bench/results/drivers/tfrecord_knobs.sh DLFEED_BIN TFRECORD_DIR HDF5_DIR [ROUNDS] [EPOCHS]
#
# Cases, alternating, ROUNDS rounds (default 3): hdf5 (fields records,labels),
# tfrecord (image,label), tfrecord --no-verify-crc, tfrecord --io-engines 16,
# and tfrecord and hdf5 with --prefetch depth:16,budget:512M.
# Prints one line a run: the case and the rate over epochs 1.. (harmonic mean
# of the summary's per-epoch samples/s), then the median of each case. The
# files are evicted and read through once first (both formats cached alike).
set -uo pipefail
BIN=${1:?usage: bench/results/drivers/tfrecord_knobs.sh DLFEED_BIN TFRECORD_DIR HDF5_DIR [ROUNDS] [EPOCHS]}
TF=${2:?}; H5=${3:?}
ROUNDS=${4:-3}
EPOCHS=${5:-12}
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import _benchlib as bl; bl.evict(sys.argv[2:]); bl.warm(sys.argv[2:])' \
  "$(dirname "$0")/../.." "$TF" "$H5"
LOG=$(mktemp)
run() {  # NAME DIR FIELDS FLAGS...
  local name=$1 dir=$2 fields=$3; shift 3
  "$BIN" run --quiet --strategy global_shuffle --epochs "$EPOCHS" --fields "$fields" --batch-size 256 \
    --resident off --summary-json /tmp/tk_s.json "$@" "$dir" > /dev/null 2>&1 || { echo "$name failed"; return; }
  "$PY" - "$name" <<'PY' | tee -a "$LOG"
import json, sys
d = json.load(open("/tmp/tk_s.json"))["run"]
rs = [e["samples_per_s"] for e in d["epochs"][1:]]
print(sys.argv[1], round(len(rs) / sum(1 / x for x in rs)), "engines", d["io_engines"], "threads", d["threads"])
PY
}
for r in $(seq "$ROUNDS"); do
  run hdf5 "$H5" records,labels
  run tfrecord "$TF" image,label
  run tfrecord_no_crc "$TF" image,label --no-verify-crc
  run tfrecord_engines16 "$TF" image,label --io_engines 16
  # Twice the read-ahead's bytes: a TFRecord batch read around its images holds
  # a read buffer as large as its images (the regions' unwritten middles), so
  # the default 256 MiB admits half the batches HDF5's does.
  run tfrecord_512M "$TF" image,label --prefetch depth:16,budget:512M
  run hdf5_512M "$H5" records,labels --prefetch depth:16,budget:512M
done
"$PY" - "$LOG" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    name, rate = line.split()[:2]
    by.setdefault(name, []).append(int(rate))
h5 = statistics.median(by.get("hdf5", [0])) or 1
for name, rates in by.items():
    m = statistics.median(rates)
    print(f"median {name}: {m:,.0f} samples/s ({m / h5:.2f} of hdf5)")
PY
rm -f "$LOG"
