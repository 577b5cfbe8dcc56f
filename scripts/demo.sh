#!/usr/bin/env bash
# The main job: set up, generate a small DLIO-layout dataset in each format
# under data/, and print what `dlfeed inspect` finds in it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
DLFEED=build/tools/dlfeed
for fmt in npz hdf5 tfrecord; do
  dir=data/demo-$fmt
  [ -d "$dir" ] || $DLFEED generate --format "$fmt" --layout dlio --dir "$dir" --files 4 --valid-files 1 \
    --samples-per-file 8 --shape 64,64 --dtype uint8
  echo "== dlfeed inspect $dir/train"
  $DLFEED inspect --limit 2 "$dir/train"
done
