#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: set up, then
#  1. small DLIO-layout datasets (HDF5, NPZ, TFRecord) under data/: what
#     `dlfeed inspect` finds, and each run through the loader with a global
#     shuffle for 2 epochs;
#  2. emulated training of a published workload, scaled down: the resnet50
#     preset (DLIO/MLPerf Storage: TFRecord, ~114 KB samples, batch 400,
#     0.224 s compute per step) at --scale 0.0025 (8 files x 401 samples,
#     ~370 MB under data/workloads/, generated once): `dlfeed calibrate`
#     measures the storage's limits for its access patterns (cold cache),
#     then `dlfeed run --workload` trains 2 epochs and reports AU, samples/s,
#     MiB/s, I/O hidden vs exposed and efficiency against the calibration;
#     then the loader alone (no compute) against the same limit.
# DEMO_WORKLOAD / DEMO_SCALE pick another preset (`dlfeed workloads` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
DLFEED=build/tools/dlfeed
for fmt in hdf5 npz tfrecord; do
  dir=data/demo-$fmt
  [ -d "$dir/train" ] || $DLFEED generate --format "$fmt" --layout dlio --dir "$dir" --files 8 --valid-files 1 \
    --samples-per-file 64 --shape 128,128 --dtype uint8 >/dev/null
done
echo "== dlfeed inspect data/demo-hdf5/train"
$DLFEED inspect --limit 2 data/demo-hdf5/train | head -n 12
for fmt in hdf5 npz tfrecord; do
  case $fmt in
    hdf5) fields=records_0,labels ;;
    npz) fields=x,y ;;
    tfrecord) fields=image,size ;;
  esac
  echo
  echo "== dlfeed run ($fmt, global shuffle, 2 epochs, 2 ms emulated compute per step)"
  $DLFEED run --fields "$fields" --strategy global_shuffle --batch-size 32 --epochs 2 --compute-ms 2 \
    --checksum "data/demo-$fmt/train"
done

WORKLOAD=${DEMO_WORKLOAD:-resnet50}
SCALE=${DEMO_SCALE:-0.0025}
echo
echo "== dlfeed workloads --scale $SCALE (the presets, published and scaled)"
$DLFEED workloads --scale "$SCALE" | awk -v w="$WORKLOAD" 'NR == 1 || (/^[a-z]/ && $1 == w) { print; if ($1 == w) { getline; print } }'
echo
echo "== dlfeed calibrate --workload $WORKLOAD --scale $SCALE (the storage's limits, cold cache)"
$DLFEED calibrate --workload "$WORKLOAD" --scale "$SCALE"
echo
echo "== dlfeed run --workload $WORKLOAD --scale $SCALE --epochs 2 (emulated training; summary JSON in data/)"
$DLFEED run --workload "$WORKLOAD" --scale "$SCALE" --epochs 2 --summary-json "data/$WORKLOAD-summary.json"
echo
echo "== the loader alone: the same, no compute (I/O-bound, so efficiency measures the loader)"
$DLFEED run --workload "$WORKLOAD" --scale "$SCALE" --compute-ms 0 --quiet | grep -E "^(efficiency|total|note)"
