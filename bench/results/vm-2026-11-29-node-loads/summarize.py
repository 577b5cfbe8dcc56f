# SPDX-License-Identifier: Apache-2.0
"""Medians of peer_exchange.jsonl (run.sh) as a table: ms per step by mode."""
import collections
import json
import pathlib
import statistics

rows = [json.loads(x) for x in (pathlib.Path(__file__).parent / "peer_exchange.jsonl").read_text().splitlines()]
t = collections.defaultdict(list)
for r in rows:
    t[(r["ranks"], r["single_copy"], r["bytes"], r["mode"])].append(r["median_step_ms"])
print("| ranks, Open MPI | sample | gets | loads | gets_created | alltoallv | gets / loads | gets_created / loads |")
print("|---|---|---|---|---|---|---|---|")
for ranks in (4, 2):
    for sc in ("none", "default"):
        for b in (4096, 147456, 1048576):
            m = {mode: statistics.median(t[(ranks, sc, b, mode)]) for mode in ("gets", "loads", "gets_created",
                                                                                "alltoallv") if t[(ranks, sc, b, mode)]}
            gc = m.get("gets_created")
            gc_text, gc_ratio = (f"{gc:.3f}", f"{gc / m['loads']:.2f}") if gc else ("-", "-")
            print(f"| {ranks}, {'single copy off' if sc == 'none' else 'its default (CMA)'} | {b // 1024} KiB "
                  f"| {m['gets']:.3f} | {m['loads']:.3f} | {gc_text} | {m['alltoallv']:.3f} "
                  f"| {m['gets'] / m['loads']:.2f} | {gc_ratio} |")
