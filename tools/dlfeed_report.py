#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws dlfeed's counters as pictures (run by `dlfeed report`, needs matplotlib).

  dlfeed_report.py --summary SUMMARY.json --trace TRACE --out DIR

breakdown.png (from `dlfeed run --summary-json`): per epoch and in total, the
time of each component: stall (the trainer waited for a batch), I/O hidden (reads
in flight during compute), decode and compute, next to the epoch's wall time
and AU (which leaves out each epoch's first step, as DLIO's does).
timeline.png (from `dlfeed run --trace`, Chrome or DFTracer format, plain or
.gz): reads in flight over time, the consumer's stalls and compute regions,
and dashed lines where the epochs begin. Both name the run (dataset, fields,
strategy, batch size, date) above the plot.
"""
import argparse
import datetime
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


def whole_json(path):
    """What a file that is one JSON document but not a trace holds ("" when it is not one): a DLIO
    summary, say, whose error as trace lines would read as a syntax error."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return ""
    if isinstance(doc, dict):
        return f"a JSON object with the keys {', '.join(list(doc)[:8])}{', ...' if len(doc) > 8 else ''}"
    return f"a JSON {type(doc).__name__}"


def run_label(summary, trace_meta, path):
    """Which run this is: dataset, fields, strategy, batch size and a date."""
    run = (summary or {}).get("run") or {}
    parts = []
    if run.get("workload"):
        parts.append(f"workload {run['workload']}")
    if run.get("paths"):
        parts.append("dataset " + ", ".join(run["paths"]))
    elif trace_meta.get("dataset"):
        parts.append(f"dataset {trace_meta['dataset']}")
    if run.get("fields"):
        parts.append("fields " + ",".join(run["fields"]))
    if run.get("strategy"):
        parts.append(f"{run['strategy']}")
    if run.get("batch_size"):
        parts.append(f"batch {run['batch_size']}")
    if trace_meta.get("time_base_unix_us"):
        when = datetime.datetime.fromtimestamp(trace_meta["time_base_unix_us"] * 1e-6)
        parts.append("run " + when.strftime("%Y-%m-%d %H:%M"))
    elif path:
        when = datetime.datetime.fromtimestamp(os.path.getmtime(path))
        parts.append("written " + when.strftime("%Y-%m-%d %H:%M"))
    return " | ".join(parts)


def trace_meta(path):
    """The trace's own header (dlfeed_trace: time base, bounds) and the folder its reads came from."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    meta, files = {}, set()
    if text.lstrip().startswith("{\"traceEvents\""):
        doc = json.loads(text)
        meta = dict(doc.get("otherData", {}).get("dlfeed_trace", {}))
        events = doc["traceEvents"]
    else:
        events = [json.loads(line) for line in text.splitlines() if line.strip() not in ("", "[", "]")]
        for e in events:
            if e.get("name") == "dlfeed_trace" and e.get("ph") == "M":
                meta = dict(e.get("args", {}))
    for e in events:
        fname = (e.get("args") or {}).get("fname")
        if fname:
            files.add(fname)
    if files:
        meta["dataset"] = os.path.commonpath(sorted(files)) if len(files) > 1 else next(iter(files))
    return meta


def breakdown(summary, out, plt, label):
    from matplotlib.lines import Line2D  # noqa: PLC0415

    epochs = summary["epochs"] + ([summary["total"]] if len(summary["epochs"]) > 1 else [])
    labels = [("total" if e["epoch"] < 0 else f"epoch {e['epoch']}") for e in epochs]
    parts = [("stall: the trainer waited for a batch", "stall_s", "#d62728"),
             ("I/O hidden: reads during compute", "io_hidden_s", "#ff9896"),
             ("decode", "decode_s", "#9467bd"), ("compute", "compute_s", "#2ca02c")]
    top = max([e["wall_s"] for e in epochs] + [e[key] for e in epochs for _, key, _ in parts] + [1e-9])
    # A series too small to see (under 0.5% of the plot's height, a pixel or
    # two) gets no bar and no legend entry; the note below the plot gives its values.
    shown = [p for p in parts if max(e[p[1]] for e in epochs) >= 0.005 * top]
    hidden = [p for p in parts if p not in shown]
    fig, ax = plt.subplots(figsize=(max(7, 1.7 * len(epochs) + 4), 5.2))
    width = 0.8 / max(1, len(shown))
    handles = []
    for k, (name, key, color) in enumerate(shown):
        xs = [i + (k - (len(shown) - 1) / 2) * width for i in range(len(epochs))]
        handles.append(ax.bar(xs, [e[key] for e in epochs], width, label=name, color=color))
    for i, e in enumerate(epochs):
        ax.hlines(e["wall_s"], i - 0.42, i + 0.42, color="black", linewidth=1.6, zorder=3)
        ax.annotate(f"AU {e['au_percent']:.1f}%", (i, e["wall_s"]), textcoords="offset points", xytext=(0, 4),
                    ha="center", va="bottom", fontsize=8)
    handles.append(Line2D([], [], color="black", linewidth=1.6, label="wall time"))
    ax.set_ylim(0, top * 1.18)  # room above the tallest wall line for its AU label
    ax.set_xticks(range(len(epochs)), labels)
    ax.set_ylabel("seconds")
    ax.set_title("dlfeed: where each epoch's time went", fontsize=11)
    fig.suptitle(label, fontsize=8, color="#444444", y=0.995)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    notes = ["AU (accelerator utilisation, as DLIO defines it) = compute / wall time, both without each epoch's "
             "first step;", "the bars count every step, so a slow first step shows in the stall bar but not in AU. "
             "Each bar is the time at least one thread spent on that part (overlaps counted once)."]
    if hidden:
        notes.append("Too small to draw: " + ", ".join(
            f"{name.split(':')[0]} (at most {max(e[key] for e in epochs) * 1e3:.2g} ms)" for name, key, _ in hidden))
    fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, color="#333333", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04 + 0.025 * len(notes), 1, 0.97))
    path = os.path.join(out, "breakdown.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timeline(events, out, plt, label):
    reads = [(ts, ts + dur) for name, ts, dur, _ in events if name == "read"]
    edges = sorted([(a, 1) for a, _ in reads] + [(b, -1) for _, b in reads])
    xs, ys, n = [0.0], [0], 0
    for t, d in edges:
        xs.append(t)
        ys.append(n)
        n += d
        xs.append(t)
        ys.append(n)
    epochs = sorted((ts, args.get("epoch", "?")) for name, ts, _, args in events if name == "epoch")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.4), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    top.plot(xs, ys, color="#1f77b4", linewidth=0.8)
    top.fill_between(xs, ys, step=None, alpha=0.3, color="#1f77b4")
    top.set_ylabel("reads in flight")
    top.set_ylim(0, max(ys + [1]) * 1.15)
    top.set_title("dlfeed: reads in flight, the trainer's waits (stall) and compute", fontsize=11)
    fig.suptitle(label, fontsize=8, color="#444444", y=0.995)
    rows = [("stall", "#d62728"), ("compute", "#2ca02c"), ("decode", "#9467bd")]
    for k, (name, color) in enumerate(rows):
        spans = [(ts, dur) for nm, ts, dur, _ in events if nm == name]
        bottom.broken_barh(spans, (k - 0.4, 0.8), color=color)
    bottom.set_yticks(range(len(rows)), [r[0] for r in rows])
    bottom.set_xlabel("seconds since the first event")
    # Epoch boundaries: a dashed line where each epoch begins, named at the top.
    for ts, epoch in epochs:
        for ax in (top, bottom):
            ax.axvline(ts, color="#555555", linestyle="--", linewidth=0.8)
        top.annotate(f"epoch {epoch}", (ts, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                     textcoords="offset points", ha="left", va="top", fontsize=8, color="#333333")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
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
    summary = None
    if a.summary:
        with open(a.summary) as f:
            summary = json.load(f)
        if summary.get("schema") != "dlfeed.counters/1":
            sys.exit(f"dlfeed report: {a.summary}: not a dlfeed summary (schema dlfeed.counters/1)")
    neither = (f"dlfeed report: {a.trace}: neither a dlfeed summary (dlfeed run --summary-json) nor a trace "
               "(dlfeed run --trace: Chrome JSON or DFTracer lines)")
    try:
        meta = trace_meta(a.trace) if a.trace else {}
        events = load_trace(a.trace) if a.trace else []
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        sys.exit(f"{neither}: {whole_json(a.trace) or e}")
    label = run_label(summary, meta, a.summary or a.trace)
    if summary:
        if summary.get("epochs"):
            print(breakdown(summary, a.out, plt, label))
        else:
            print(f"dlfeed report: {a.summary}: no epochs in the summary (a run of --epochs 0): no breakdown")
    if a.trace:
        if not events:
            sys.exit(f"{neither}: no trace events in it")
        print(timeline(events, a.out, plt, label))


if __name__ == "__main__":
    try:
        main()
    except (OSError, EOFError) as e:  # a folder or a cut .gz given, an --out that cannot be made: said, not traced
        sys.exit(f"dlfeed report: {e}")
