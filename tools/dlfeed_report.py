#!/usr/bin/env python3
"""Draws dlfeed's counters as pictures (run by `dlfeed report`, needs matplotlib).

  dlfeed_report.py --summary SUMMARY.json --trace TRACE --out DIR

breakdown.png (from `dlfeed run --summary-json`): per epoch and in total, the
time of each component: I/O exposed (the trainer stalled), I/O hidden (reads
in flight during compute), decode and compute, next to the epoch's wall time.
timeline.png (from `dlfeed run --trace`, Chrome or DFTracer format): reads in
flight over time, and the consumer's stalls and compute regions.
"""
import argparse
import gzip
import json
import os
import sys


def load_trace(path):
    """The events of a Chrome trace JSON or a DFTracer file (plain or .gz) as (dlfeed name, ts, dur, args),
    ts and dur in seconds from the first event: complete events (ph X) and the async reads (ph b/e)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    if text.lstrip().startswith("{\"traceEvents\""):
        raw = json.loads(text)["traceEvents"]
    else:
        raw = [json.loads(line) for line in text.splitlines() if line.strip() not in ("", "[", "]")]
    events, begun = [], {}
    for e in raw:
        args = e.get("args") or {}
        # DFTracer lines carry DFTracer's names (POSIX pread ...) and dlfeed's in args["dlfeed"].
        name = args.get("dlfeed", e.get("name"))
        if e.get("ph") == "X":
            events.append((name, float(e["ts"]), float(e["dur"]), args))
        elif e.get("ph") == "b":
            begun[e["id"]] = (name, float(e["ts"]), args)
        elif e.get("ph") == "e" and e.get("id") in begun:
            name, ts, args = begun.pop(e["id"])
            events.append((name, ts, float(e["ts"]) - ts, args))
    if not events:
        return []
    t0 = min(ts for _, ts, _, _ in events)
    return [(name, (ts - t0) * 1e-6, dur * 1e-6, args) for name, ts, dur, args in events]


def breakdown(summary, out, plt):
    epochs = summary["epochs"] + ([summary["total"]] if len(summary["epochs"]) > 1 else [])
    labels = [("total" if e["epoch"] < 0 else f"epoch {e['epoch']}") for e in epochs]
    parts = [("I/O exposed (stall)", "stall_s", "#d62728"), ("I/O hidden", "io_hidden_s", "#ff9896"),
             ("decode", "decode_s", "#9467bd"), ("compute", "compute_s", "#2ca02c")]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(epochs) + 3), 4.5))
    width = 0.8 / len(parts)
    for k, (name, key, color) in enumerate(parts):
        xs = [i + (k - (len(parts) - 1) / 2) * width for i in range(len(epochs))]
        ax.bar(xs, [e[key] for e in epochs], width, label=name, color=color)
    ax.scatter(range(len(epochs)), [e["wall_s"] for e in epochs], marker="_", s=900, color="black", label="wall time",
               zorder=3)
    for i, e in enumerate(epochs):
        ax.annotate(f"AU {e['au_percent']:.1f}%", (i, e["wall_s"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.set_xticks(range(len(epochs)), labels)
    ax.set_ylabel("seconds")
    ax.set_title("dlfeed: time per component (interval unions)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path = os.path.join(out, "breakdown.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timeline(events, out, plt):
    reads = [(ts, ts + dur) for name, ts, dur, _ in events if name == "read"]
    edges = sorted([(a, 1) for a, _ in reads] + [(b, -1) for _, b in reads])
    xs, ys, n = [0.0], [0], 0
    for t, d in edges:
        xs.append(t)
        ys.append(n)
        n += d
        xs.append(t)
        ys.append(n)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    top.plot(xs, ys, color="#1f77b4", linewidth=0.8)
    top.fill_between(xs, ys, step=None, alpha=0.3, color="#1f77b4")
    top.set_ylabel("reads in flight")
    top.set_title("dlfeed: reads in flight, stalls and compute")
    rows = [("stall", "#d62728"), ("compute", "#2ca02c"), ("decode", "#9467bd")]
    for k, (name, color) in enumerate(rows):
        spans = [(ts, dur) for nm, ts, dur, _ in events if nm == name]
        bottom.broken_barh(spans, (k - 0.4, 0.8), color=color)
    bottom.set_yticks(range(len(rows)), [r[0] for r in rows])
    bottom.set_xlabel("seconds since the first event")
    fig.tight_layout()
    path = os.path.join(out, "timeline.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summary")
    p.add_argument("--trace")
    p.add_argument("--out", default=".")
    a = p.parse_args()
    if not a.summary and not a.trace:
        p.error("give --summary and/or --trace")
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        sys.exit("dlfeed report: matplotlib is missing: pip install matplotlib (see requirements-test.txt)")
    os.makedirs(a.out, exist_ok=True)
    if a.summary:
        with open(a.summary) as f:
            summary = json.load(f)
        if summary.get("schema") != "dlfeed.counters/1":
            sys.exit(f"dlfeed report: {a.summary}: not a dlfeed summary (schema dlfeed.counters/1)")
        print(breakdown(summary, a.out, plt))
    if a.trace:
        print(timeline(load_trace(a.trace), a.out, plt))


if __name__ == "__main__":
    main()
