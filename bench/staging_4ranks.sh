#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Node-local staging, 4 ranks on one machine (docs/performance.md): the same
# job with and without --stage-to, alternating, ROUNDS rounds each; prints the
# job's read MiB/s and wall time per epoch (medians) and the staged share.
#   bench/staging_4ranks.sh [STRATEGY] [ROUNDS]
# Source reads use O_DIRECT (--direct: no page cache, standing in for a
# shared file system); the copies go to /dev/shm (tmpfs: memory).
set -euo pipefail
cd "$(dirname "$0")/.."
STRATEGY=${1:-local_shuffle}
ROUNDS=${2:-3}
DATA=data/stage4
STAGE=/dev/shm/dlfeed-bench-stage-$$
OUT=out/staging_4ranks
BIN=build/tools/dlfeed
MPIRUN=(mpirun --oversubscribe -np 4)
[ "$(id -u)" -eq 0 ] && MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 4)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$OUT"
if [ ! -d "$DATA/train" ]; then
  # 64 HDF5 files x 16 samples of 256 KiB (contiguous): 256 MiB.
  "$BIN" generate --format hdf5 --layout dlio --dir "$DATA" --files 64 --samples-per-file 16 \
    --shape 512,512 --dtype uint8 >/dev/null
fi
trap 'rm -rf "$STAGE"' EXIT
RUN=(run --fields records_0 --strategy "$STRATEGY" --epochs 3 --batch-size 4 --direct --quiet)
for r in $(seq 1 "$ROUNDS"); do
  "${MPIRUN[@]}" "$BIN" "${RUN[@]}" --summary-json "$OUT/source.$STRATEGY.$r.json" "$DATA/train" >/dev/null
  rm -rf "$STAGE"
  "${MPIRUN[@]}" "$BIN" "${RUN[@]}" --stage-to "$STAGE" --summary-json "$OUT/staged.$STRATEGY.$r.json" \
    "$DATA/train" >/dev/null
done
python3 - "$OUT" "$STRATEGY" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, strategy, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
print(f"strategy {strategy}, 4 ranks, {rounds} rounds (median; min-max)")
print("| run | epoch | read MiB/s | wall s | from staged copies |")
print("|---|---|---|---|---|")
for kind in ("source", "staged"):
    runs = [json.load(open(f"{out}/{kind}.{strategy}.{r}.json")) for r in range(1, rounds + 1)]
    for e in range(3):
        ep = [s["epochs"][e] for s in runs]
        mib = [x["read_mib_per_s"] for x in ep]
        wall = [x["wall_s"] for x in ep]
        share = [x["bytes_read_staged"] / x["bytes_read"] if x["bytes_read"] else 0 for x in ep]
        print(f"| {kind} | {e} | {statistics.median(mib):.0f} ({min(mib):.0f}-{max(mib):.0f}) | "
              f"{statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f}) | {100 * statistics.median(share):.0f}% |")
EOF
