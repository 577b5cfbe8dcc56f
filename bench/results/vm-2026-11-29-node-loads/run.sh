#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The job cache's reads of a node's other ranks: plain loads from one MPI
# shared-memory window against MPI_Get (bench/peer_exchange.cc), 3 rounds of
# each configuration; medians by summarize.py. Run from the repository root
# after building (build/bench/peer_exchange).
set -e
out=bench/results/vm-2026-11-29-node-loads/peer_exchange.jsonl
: > "$out"
for round in 1 2 3; do
  for np in 4 2; do
    for sc in none default; do
      if [ "$sc" = none ]; then export OMPI_MCA_btl_vader_single_copy_mechanism=none
      else unset OMPI_MCA_btl_vader_single_copy_mechanism; fi
      mpirun --oversubscribe --allow-run-as-root -np "$np" build/bench/peer_exchange \
          --bytes 4096,147456,1048576 --batch 32 --steps 200 --samples-per-rank 256 |
        sed "s/^{/{\"round\": $round, \"single_copy\": \"$sc\", /" >> "$out"
    done
  done
done
