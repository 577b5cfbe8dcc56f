#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Merges the per-rank traces of `mpirun -np N dlfeed run --trace t.json`
(t.rank0.json, t.rank1.json, ...) into one Chrome trace JSON that Perfetto
(https://ui.perfetto.dev) shows as one timeline with a process per rank.

    python3 tools/dlfeed_trace_merge.py --out job.json t.rank*.json

Each rank's Chrome trace counts time from its own loader's creation; the
file's otherData.dlfeed_trace.time_base_unix_us says when that was, so the
events are shifted onto the earliest rank's time base (clocks of different
nodes are only as aligned as the nodes' clocks). DFTracer traces (.pfw or
.pfw.gz, absolute microseconds) are accepted too and converted. The pids (= ranks)
are kept. Standard library only."""
import argparse
import gzip
import json
import sys


def load(path):
    """(time base in us since 1970, events with ts relative to that base)."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        meta = doc.get("otherData", {}).get("dlfeed_trace", {})
        if "time_base_unix_us" not in meta:
            raise SystemExit(f"{path}: not a dlfeed Chrome trace (no otherData.dlfeed_trace.time_base_unix_us)")
        return int(meta["time_base_unix_us"]), doc["traceEvents"]
    # DFTracer: '[', one event per line with absolute integer microseconds, ']'.
    events = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip().rstrip(",")
        if line in ("", "[", "]"):
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}: line {n}: expected one JSON event per line: {e}")
    if not events:
        raise SystemExit(f"{path}: no events")
    timed = [int(e["ts"]) for e in events if "ts" in e]  # metadata lines (ph M) have no ts
    if not timed:
        raise SystemExit(f"{path}: no timed events")
    base = min(timed)
    out = []
    for e in events:
        e = {k: v for k, v in e.items() if k != "id"}
        if "ts" in e:
            e["ts"] = int(e["ts"]) - base
        if e.get("ph") == "M" and e.get("name") == "dlfeed_trace":
            continue
        out.append(e)
    return base, out


def merge(paths):
    loaded = [load(p) for p in paths]
    base = min(b for b, _ in loaded)
    events = []
    for b, evs in loaded:
        shift = b - base
        for e in evs:
            if e.get("ph") != "M":
                e = dict(e, ts=round(float(e["ts"]) + shift, 3))
            events.append(e)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"dlfeed_trace_merge": {"files": list(paths), "time_base_unix_us": base}}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="merged Chrome trace JSON")
    ap.add_argument("traces", nargs="+", help="per-rank traces (Chrome JSON or DFTracer .pfw)")
    a = ap.parse_args(argv)
    merged = merge(a.traces)
    with open(a.out, "w") as f:
        json.dump(merged, f)
    pids = sorted({e.get("pid") for e in merged["traceEvents"]}, key=str)
    print(f"{a.out}: {len(merged['traceEvents'])} events from {len(a.traces)} traces, pids {pids}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
