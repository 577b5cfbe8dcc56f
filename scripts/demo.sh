#!/usr/bin/env bash
# The main job: set up, generate a small DLIO-layout dataset (HDF5, plus NPZ
# and TFRecord) under data/, show what `dlfeed inspect` finds, then run it
# through the loader with a global shuffle for 2 epochs and print the report.
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
