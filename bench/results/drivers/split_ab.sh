#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Side by side: CoalesceOptions::split_above on (the default, 256 KiB, in
# 64 KiB pieces) and off (--split-above 0), alternating, ROUNDS rounds
# (docs/performance.md, "Cold, in order"). Each cell is epoch 1's samples/s
# of `dlfeed run --resident off --fields records --epochs 2`; cold runs drop
# the files' pages before each epoch (--evict).
#
#   bench/results/drivers/split_ab.sh 5
#
# Datasets (made by the benches that own them): data/shuffle/full
# (bench/shuffle/sweep.py), data/bench/small4mb-f32-4x28
# (bench/small_samples.py), data/bench/random128k-8x256
# (bench/loader_vs_device.py).
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
D=build/tools/dlfeed
rounds=${1:-5}
epoch1() {
  "$D" run --resident off --fields records --epochs 2 "$@" 2>&1 | grep -E "^epoch 1:" |
    sed -E 's/.*in ([0-9.]+) s: ([0-9]+) samples.*/\2/'
}
for r in $(seq 1 "$rounds"); do
  for split in 262144 0; do
    a=$(epoch1 --strategy sequential --batch-size 32 --evict --split-above $split data/shuffle/full)
    b=$(epoch1 --strategy sequential --batch-size 8 --evict --split-above $split data/bench/small4mb-f32-4x28)
    c=$(epoch1 --strategy global_shuffle --batch-size 32 --evict --split-above $split data/bench/random128k-8x256)
    d=$(epoch1 --strategy sequential --batch-size 8 --split-above $split data/bench/small4mb-f32-4x28)
    e=$(epoch1 --strategy sequential --batch-size 32 --split-above $split data/shuffle/full)
    echo "round $r split_above=$split seq16k_cold=$a seq4m_cold=$b rnd128k_cold=$c seq4m_warm=$d seq16k_warm=$e"
  done
done
