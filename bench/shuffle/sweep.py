#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Shuffle strategies: randomness against throughput, on one dataset.

Sweeps every order strategy and its parameters (buffer size; block size and
window) over one HDF5 dataset, cold and warm cache. Throughput comes from the
real loader (bench/compare/compare_cpp: the C++ API, one timed epoch after a
warm-up, every sample touched), the device limit for the same order from
bench/raw_read, and randomness from `dlfeed order --stats` of the same order.
Systems alternate within a round; medians over rounds. Then the parser,
order-generation and counter micro benchmarks (Google Benchmark) run once.

    .venv/bin/python bench/shuffle/sweep.py           # writes docs/performance.md and docs/img/shuffle_frontier.png
    .venv/bin/python bench/shuffle/sweep.py --quick   # tiny dataset, one round, prints only

Randomness score (0: the file order, 1: a uniform shuffle):
    mixing x decorrelation, where
    mixing        = (distinct files per batch - 1) / (a uniform shuffle's expectation - 1), clipped to [0, 1]
    decorrelation = 1 - |Spearman rank correlation of position and sample id|
A file shuffle moves whole files (decorrelated) but every batch is one file
(mixing 0): score 0. Build first:
    BUILD_TARGETS="dlfeed_cli raw_read compare_cpp order_bench parse_bench counters_bench" scripts/setup.sh
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
from typing import Dict, List

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _benchlib as bl  # noqa: E402

COMPARE_CPP = bl.BUILD / "bench" / "compare_cpp"
SECTION_SWEEP = "bench/shuffle"
SECTION_MICRO = "bench/micro"
COMMAND = ".venv/bin/python bench/shuffle/sweep.py"

# (label, strategy, params): every strategy, the parameterized ones at several settings.
CONFIGS = [
    ("sequential", "sequential", {}),
    ("file_shuffle", "file_shuffle", {}),
    ("buffered 1k", "buffered_shuffle", {"buffer_size": 1024}),
    ("buffered 8k", "buffered_shuffle", {"buffer_size": 8192}),
    ("buffered 16k", "buffered_shuffle", {"buffer_size": 16384}),
    ("block B16 W4", "block_shuffle", {"block_size": 16, "window": 4}),
    ("block B64 W16", "block_shuffle", {"block_size": 64, "window": 16}),
    ("block B256 W16", "block_shuffle", {"block_size": 256, "window": 16}),
    ("block B64 W64", "block_shuffle", {"block_size": 64, "window": 64}),
    ("block B1024 W8", "block_shuffle", {"block_size": 1024, "window": 8}),
    ("local_shuffle", "local_shuffle", {}),
    ("global_shuffle", "global_shuffle", {}),
    ("global_feistel", "global_feistel", {}),
]

GEN = ["--format", "hdf5", "--files", 16, "--samples-per-file", 1024, "--shape", "128,128"]
QUICK_GEN = ["--format", "hdf5", "--files", 4, "--samples-per-file", 256, "--shape", "128,128"]
SAMPLE_BYTES = 128 * 128
FIELD = "records"


def flags(params: Dict[str, int]) -> List:
    out: List = []
    for k, v in params.items():
        out += [f"--{k.replace('_', '-')}", v]
    return out


def quality(path: pathlib.Path, strategy: str, params: Dict[str, int], batch: int, layout: Dict) -> Dict:
    out = bl.sh([bl.DLFEED, "order", "--dataset", path, "--name", FIELD, "--strategy", strategy, "--seed", 42,
                 "--epoch", 1, "--stats", "--batch-size", batch, *flags(params)])
    st = {}
    for line in out.splitlines():
        k, _, v = line.partition(":")
        try:
            st[k.strip()] = float(v)
        except ValueError:
            pass
    # A uniform shuffle's expected distinct files per batch: sum over files of P(file in batch).
    n, sizes = layout["samples"], layout["sizes"]
    expect = sum(1 - (1 - s / n) ** batch for s in sizes)
    mixing = min(1.0, max(0.0, (st["distinct_files_per_batch"] - 1) / (expect - 1))) if expect > 1 else 1.0
    st["mixing"] = mixing
    st["decorrelation"] = 1 - abs(st["rank_correlation"])
    st["score"] = mixing * st["decorrelation"]
    st["uniform_files_per_batch"] = expect
    return st


def loader_run(path, strategy, params, cold, a) -> Dict:
    cmd = [COMPARE_CPP, "--fields", FIELD, "--batch-size", a.batch_size, "--strategy", strategy,
           "--warmup-batches", a.warmup_batches, "--settle-s", a.settle_s, *flags(params)]
    if cold:
        cmd.append("--cold")
    out, peak = bl.run_measured([*cmd, path])
    r = json.loads(out.strip().splitlines()[-1])
    r["samples_s"] = r["samples"] / r["seconds"]
    r["peak_rss_kib"] = peak
    return r


def device_run(path, strategy, params, cold, max_seconds) -> Dict:
    return bl.device_limit(path, strategy, cold, name=FIELD, params=params, epoch=1, max_seconds=max_seconds)


def sweep(a) -> Dict:
    path = pathlib.Path(a.data) / ("quick" if a.quick else "full")
    if bl.generate(path, QUICK_GEN if a.quick else GEN):
        print(f"generated {path}", flush=True)
    info = json.loads(bl.sh([bl.DLFEED, "inspect", "--json", "--name", FIELD, "--limit", 0, path]))
    fb = info["file_begin"]
    sizes = [fb[i + 1] - fb[i] for i in range(len(fb) - 1)]
    layout = {"samples": sum(sizes), "sizes": sizes}
    configs = CONFIGS if not a.configs else [c for c in CONFIGS if c[0] in set(a.configs.split(","))]
    caches = [c for c in a.caches.split(",") if c]
    res = {"machine": bl.machine(), "commit": bl.git_commit(), "quick": a.quick, "rounds": a.rounds,
           "batch_size": a.batch_size,
           "path": str(path.relative_to(bl.ROOT) if path.is_relative_to(bl.ROOT) else path),
           "gen": " ".join(map(str, QUICK_GEN if a.quick else GEN)), "layout": layout,
           "device_source": bl.DEVICE_LIMIT_SOURCE.format(max_seconds=a.device_seconds), "configs": []}
    entries = []
    for label, strategy, params in configs:
        q = quality(path, strategy, params, a.batch_size, layout)
        entries.append({"label": label, "strategy": strategy, "params": params, "quality": q,
                        "runs": {c: {"loader": [], "device": []} for c in caches}})
        print(f"{label}: randomness {q['score']:.2f} (files/batch {q['distinct_files_per_batch']:.1f}, "
              f"corr {q['rank_correlation']:.3f})", flush=True)
    for rnd in range(a.rounds):
        for cache in caches:
            cold = cache == "cold"
            if not cold:
                bl.warm([path])
            for e in bl.rotated(entries, rnd):
                r = loader_run(path, e["strategy"], e["params"], cold, a)
                e["runs"][cache]["loader"].append(r)
                msg = f"[{cache} round {rnd + 1}/{a.rounds}] {e['label']}: dlfeed {r['samples_s']:,.0f} samples/s"
                if a.device:
                    d = device_run(path, e["strategy"], e["params"], cold, a.device_seconds)
                    e["runs"][cache]["device"].append(d)
                    msg += f", device {d['samples_s']:,.0f}"
                print(msg, flush=True)
    for e in entries:
        e["median"] = {}
        for cache, runs in e["runs"].items():
            sps = bl.median([r["samples_s"] for r in runs["loader"]])
            dev = bl.median([r["samples_s"] for r in runs["device"]])
            e["median"][cache] = {"samples_s": sps, "mib_s": sps * SAMPLE_BYTES / 2**20,
                                  "device_samples_s": dev, "eff": sps / dev if dev == dev and dev else float("nan"),
                                  "rounds": [round(r["samples_s"]) for r in runs["loader"]]}
    res["configs"] = entries
    res["machine"]["load_end"] = f"{os.getloadavg()[0]:.1f}"
    return res


def pareto(points):
    """Indices of the points no other point beats on both x and y (higher is better)."""
    keep = []
    for i, (x, y) in enumerate(points):
        if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            keep.append(i)
    return sorted(keep, key=lambda i: points[i][0])


def pick(res: Dict, cache: str) -> Dict:
    """The recommendation: the fastest configuration within 0.05 of the best randomness."""
    es = [e for e in res["configs"] if cache in e["median"]]
    best = max(e["quality"]["score"] for e in es)
    good = [e for e in es if e["quality"]["score"] >= best - 0.05]
    return max(good, key=lambda e: e["median"][cache]["samples_s"])


def ties(res: Dict, cache: str) -> List[str]:
    """Other near-best-randomness configurations whose rounds overlap the pick's: equal within noise."""
    p = pick(res, cache)
    lo = min(r["samples_s"] for r in p["runs"][cache]["loader"])
    best = max(e["quality"]["score"] for e in res["configs"])
    return [e["label"] for e in res["configs"] if e is not p and e["quality"]["score"] >= best - 0.05
            and max(r["samples_s"] for r in e["runs"][cache]["loader"]) >= lo]


def place_labels(ax, xy, labels, bold):
    """Greedy label placement: for each point the first candidate offset whose
    box (estimated in display points) overlaps no label placed so far."""
    fig = ax.figure
    fig.canvas.draw()
    to_pts = 72.0 / fig.dpi
    placed = []
    cands = [(6, 3), (6, -11), (-6, 3), (-6, -11), (6, 12), (6, -20), (-6, 12), (-6, -20), (0, 16), (0, -25)]
    order = sorted(range(len(xy)), key=lambda i: (-xy[i][1], xy[i][0]))
    for i in order:
        px, py = ax.transData.transform(xy[i])
        px, py = px * to_pts, py * to_pts
        w, h = 4.6 * len(labels[i]) + 2, 9
        choice = cands[0]
        for dx, dy in cands:
            x0 = px + dx if dx >= 0 else px + dx - w
            box = (x0, py + dy, x0 + w, py + dy + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                choice = (dx, dy)
                placed.append(box)
                break
        else:
            placed.append((px, py, px + w, py + h))
        ax.annotate(labels[i], xy[i], xytext=choice, textcoords="offset points", fontsize=8,
                    ha="left" if choice[0] >= 0 else "right", fontweight="bold" if bold[i] else "normal")


def frontier_chart(res: Dict, out: pathlib.Path) -> pathlib.Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caches = [c for c in ("cold", "warm") if all(c in e["median"] for e in res["configs"])]
    fig, axes = plt.subplots(1, len(caches), figsize=(7.2 * len(caches), 6.6), squeeze=False)
    colors = {"sequential": "#7f7f7f", "file_shuffle": "#8c564b", "buffered_shuffle": "#2ca02c",
              "block_shuffle": "#1f77b4", "local_shuffle": "#9467bd", "global_shuffle": "#d62728",
              "global_feistel": "#ff7f0e"}
    for ax, cache in zip(axes[0], caches):
        es = res["configs"]
        pts = [(e["median"][cache]["mib_s"], e["quality"]["score"]) for e in es]
        front = pareto(pts)
        fx = [pts[i][0] for i in front]
        fy = [pts[i][1] for i in front]
        ax.plot(fx, fy, "-", color="#333333", lw=2, alpha=0.5, zorder=1, label="Pareto frontier")
        for i, (e, (x, y)) in enumerate(zip(es, pts)):
            on = i in front
            rounds = [r["samples_s"] * SAMPLE_BYTES / 2**20 for r in e["runs"][cache]["loader"]]
            if len(rounds) > 1:  # the spread of the rounds: what the medians can and cannot tell apart
                ax.plot([min(rounds), max(rounds)], [y, y], "-", color=colors.get(e["strategy"], "k"), lw=1.2,
                        alpha=0.45, zorder=2)
            ax.scatter([x], [y], s=110 if on else 45, color=colors.get(e["strategy"], "k"),
                       edgecolor="black" if on else "none", linewidth=1.2, zorder=3)
        ax.set_ylim(-0.08, 1.12)
        ax.set_xlim(0, max(max(r["samples_s"] for r in e["runs"][cache]["loader"]) for e in es)
                    * SAMPLE_BYTES / 2**20 * 1.2)
        place_labels(ax, pts, [e["label"] for e in es], [i in front for i in range(len(es))])
        p = pick(res, cache)
        px, py = p["median"][cache]["mib_s"], p["quality"]["score"]
        ax.scatter([px], [py], s=420, facecolor="none", edgecolor="#d62728", linewidth=2.2, zorder=4)
        seq = next((e for e in es if e["strategy"] == "sequential"), None)
        rel = (f", {p['median'][cache]['samples_s'] / seq['median'][cache]['samples_s']:.0%} of sequential's speed"
               if seq else "")
        tie = ties(res, cache)
        ax.set_title(f"{cache} cache: PICK {p['label']}\n(randomness {py:.2f} at {px:,.0f} MiB/s{rel})"
                     + (f"\nequal within the rounds' spread: {', '.join(tie)}" if tie else ""),
                     fontsize=11, fontweight="bold", color="#d62728")
        ax.set_xlabel("dlfeed throughput, MiB/s (higher is better)")
        ax.set_ylabel("randomness score (0 = file order, 1 = uniform shuffle)")
        ax.grid(alpha=0.3)
        if cache == caches[0]:
            from matplotlib.lines import Line2D

            used = [k for k in colors if any(e["strategy"] == k for e in es)]
            handles = [Line2D([], [], color="#333333", lw=2, alpha=0.5, label="Pareto frontier (bold labels)"),
                       Line2D([], [], color="#999999", lw=1.2, label="spread of the rounds (min-max)")]
            handles += [Line2D([], [], marker="o", ls="", color=colors[k], label=k) for k in used]
            ax.legend(handles=handles, loc="lower left", fontsize=8, title="strategy", title_fontsize=8)
    m = res["machine"]
    fig.suptitle("Which shuffle to pick: randomness vs throughput (upper right is best; circled = the pick)",
                 fontsize=12, fontweight="bold")
    fig.text(0.01, 0.005, f"{res['path']}: {res['gen']}; batch {res['batch_size']}; medians of {res['rounds']} "
             f"rounds; {m['date']}, {m['node']} ({m['cores']} cores, 1-min load {m['load']}"
             f"{' to ' + m['load_end'] if m.get('load_end') else ''}); bench/shuffle/sweep.py"
             f"{' (shared machine: see the note)' if res.get('note') else ''}", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.02, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def sweep_markdown(res: Dict, img_rel: str) -> str:
    caches = [c for c in ("cold", "warm") if all(c in e["median"] for e in res["configs"])]
    lines = [
        "## Shuffle strategies: randomness vs throughput",
        "",
        f"{bl.machine_line(res['machine'])}, commit {res['commit']}, by",
        "",
        f"    {COMMAND}",
        "",
        f"One dataset, `{res['path']}` (`dlfeed generate {res['gen']}`: "
        f"{res['layout']['samples']:,} samples of {SAMPLE_BYTES // 1024} KiB in {len(res['layout']['sizes'])} "
        f"files), every strategy at several parameters. *dlfeed* is the C++ loader "
        f"(bench/compare/compare_cpp: batch {res['batch_size']}, default options, one timed epoch after warm-up "
        f"batches, every sample touched); *device* is {res['device_source']}. Medians of "
        f"{res['rounds']} round{'s' if res['rounds'] != 1 else ''}, the configurations' running order rotated each round; cold runs drop the "
        "files' pages first. Randomness is `dlfeed order --stats` of the same order (epoch 1, seed 42): "
        "*score* = mixing x (1 - |rank correlation|), mixing = (distinct files per batch - 1) / (a uniform "
        "shuffle's expectation - 1); 0 is the file order, 1 a uniform shuffle.",
        "",
        f"![frontier]({img_rel}/shuffle_frontier.png)",
        "",
    ]
    for cache in caches:
        p = pick(res, cache)
        tie = ties(res, cache)
        lines.append(f"Pick ({cache} cache): **{p['label']}**, the fastest configuration within 0.05 of the best "
                     f"randomness score ({p['median'][cache]['mib_s']:,.0f} MiB/s)"
                     + (f"; equal to it within the rounds' spread: {', '.join(tie)}." if tie else "."))
    lines += ["", "| configuration | score | files/batch | rank corr | " +
              " | ".join(f"{c} MiB/s | {c} % of device" for c in caches) + " | rounds, MiB/s (" +
              "; ".join(caches) + ") |",
              "|---|---|---|---|" + "---|---|" * len(caches) + "---|"]
    for e in sorted(res["configs"], key=lambda e: -e["quality"]["score"]):
        q = e["quality"]
        cells = []
        for c in caches:
            m = e["median"][c]
            cells += [f"{m['mib_s']:,.0f}", "–" if m["eff"] != m["eff"] else f"{m['eff']:.0%}"]
        spread = "; ".join(" ".join(f"{x * SAMPLE_BYTES / 2**20:,.0f}" for x in e["median"][c]["rounds"])
                           for c in caches)
        lines.append(f"| {e['label']} | {q['score']:.2f} | {q['distinct_files_per_batch']:.1f} | "
                     f"{q['rank_correlation']:.3f} | " + " | ".join(cells) + f" | {spread} |")
    lines += ["", f"A uniform shuffle gives {res['configs'][0]['quality']['uniform_files_per_batch']:.1f} distinct "
              "files per batch here. *% of device* above 100% means dlfeed's deeper queue and coalescing beat "
              "the raw reader's one read per sample at depth 32 (see the notes above)."]
    if res.get("note"):
        lines += ["", f"Note: {res['note']}"]
    lines += ["", f"All numbers of a run: `data/shuffle/full/results.json` (not committed); `{COMMAND} --from-json "
              "data/shuffle/full/results.json` redraws this section and the chart.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- micro benchmarks

MICRO = [
    ("parse_bench", ".", "parsers: NPY header, TFRecord framing and unframing, Example features, CRC32C"),
    ("order_bench", "BM_Epoch/.*/1048576/1$|BM_FeistelAt", "order generation, 2^20 samples, one rank"),
    ("counters_bench", "Record|Trace", "counter recording"),
]


def run_micro(a) -> List[Dict]:
    rows = []
    for binary, flt, what in MICRO:
        exe = bl.BUILD / "bench" / binary
        if not exe.exists():
            print(f"skip {binary}: not built", flush=True)
            continue
        cmd = [exe, f"--benchmark_filter={flt}", "--benchmark_format=json"]
        if a.quick:
            cmd.append("--benchmark_min_time=0.05")
        env = dict(os.environ, DLFEED_BENCH_DIR=str(pathlib.Path(a.data)))
        out = bl.sh(cmd, env=env)
        for b in json.loads(out)["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            rows.append({"binary": binary, "what": what, "name": b["name"], "label": b.get("label", ""),
                         "ns": b["cpu_time"] * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]],
                         "items_s": b.get("items_per_second"), "bytes_s": b.get("bytes_per_second"),
                         "error": b.get("error_message", "")})
            print(f"{b['name']}: {rows[-1]['ns']:,.1f} ns"
                  + (f", {rows[-1]['items_s']:,.0f} items/s" if rows[-1]["items_s"] else "")
                  + (f", {rows[-1]['bytes_s'] / 2**30:,.2f} GiB/s" if rows[-1]["bytes_s"] else ""), flush=True)
    return rows


def human_time(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:,.2f} µs"
    return f"{ns:,.1f} ns"


def micro_markdown(rows: List[Dict], m: Dict, commit: str) -> str:
    lines = [
        "## Micro benchmarks: parsers, order generation, counters",
        "",
        f"{bl.machine_line(m)}, commit {commit}, by `{COMMAND}` (which runs, with "
        "`--benchmark_format=json`):",
        "",
    ]
    for binary, flt, what in MICRO:
        lines.append(f"    build/bench/{binary} --benchmark_filter='{flt}'   # {what}")
    lines += ["", "One run each, unpinned; times and rates are CPU time per iteration (Google Benchmark's "
              "default for rates).", "",
              "| benchmark | time per iteration | items/s | bytes/s | note |", "|---|---|---|---|---|"]
    for r in rows:
        items = f"{r['items_s'] / 1e6:,.2f} M" if r["items_s"] else "–"
        byts = f"{r['bytes_s'] / 2**30:,.2f} GiB" if r["bytes_s"] else "–"
        note = r["error"] or r["label"]
        lines.append(f"| `{r['name']}` | {human_time(r['ns'])} | {items} | {byts} | {note} |")
    lines += ["", "items are: headers (NPY), records (TFRecord framing, scan, unframe), Examples (features, "
              "parse), ids (order), recording calls (counters).", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(bl.ROOT / "data" / "shuffle"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--warmup-batches", type=int, default=4)
    ap.add_argument("--settle-s", type=float, default=0.5)
    ap.add_argument("--caches", default="cold,warm")
    ap.add_argument("--device-seconds", type=float, default=2,
                    help="most seconds of each cold device measurement (dlfeed calibrate --max-seconds)")
    ap.add_argument("--configs", default="", help="comma-separated labels (default: all)")
    ap.add_argument("--no-device", dest="device", action="store_false", help="skip the raw_read runs")
    ap.add_argument("--no-micro", dest="micro", action="store_false", help="skip the Google Benchmark cases")
    ap.add_argument("--no-sweep", dest="sweep", action="store_false", help="only the Google Benchmark cases")
    ap.add_argument("--quick", action="store_true", help="tiny dataset, one round; prints, writes no docs")
    ap.add_argument("--from-json", help="measure nothing: redraw the sweep's table and chart from a results.json")
    ap.add_argument("--note", help="a remark printed with the results (e.g. what else ran on the machine)")
    ap.add_argument("--doc", default=str(bl.ROOT / "docs" / "performance.md"))
    ap.add_argument("--img-dir", default=str(bl.ROOT / "docs" / "img"))
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.settle_s, a.warmup_batches = 1, 0.1, 2
    bl.require(bl.DLFEED, bl.RAW, COMPARE_CPP, targets="dlfeed_cli raw_read compare_cpp")
    t0 = time.time()
    doc, img = pathlib.Path(a.doc), pathlib.Path(a.img_dir)
    out_dir = pathlib.Path(a.data) / ("quick" if a.quick else "full")
    if a.from_json:
        a.micro = False
    if a.sweep:
        if a.from_json:
            res = json.loads(pathlib.Path(a.from_json).read_text())
            a.quick = res.get("quick", a.quick)
            out_dir = pathlib.Path(a.data) / ("quick" if a.quick else "full")
        else:
            res = sweep(a)
            bl.dump_json(out_dir / "results.json", res)
        if a.note:
            res["note"] = a.note
        for cache in [c for c in ("cold", "warm") if all(c in e["median"] for e in res["configs"])]:
            p = pick(res, cache)
            print(f"pick ({cache}): {p['label']} at {p['median'][cache]['mib_s']:,.0f} MiB/s, "
                  f"randomness {p['quality']['score']:.2f}")
        if a.quick:
            print(f"wrote {frontier_chart(res, out_dir / 'shuffle_frontier.png')}")
            print(sweep_markdown(res, "img"))
        else:
            print(f"wrote {frontier_chart(res, img / 'shuffle_frontier.png')}")
            bl.replace_section(doc, SECTION_SWEEP, sweep_markdown(res, os.path.relpath(img, doc.parent)))
            print(f"wrote {doc}")
    if a.micro:
        rows = run_micro(a)
        out_dir.mkdir(parents=True, exist_ok=True)
        bl.dump_json(out_dir / "micro.json", rows)
        if not a.quick:
            bl.replace_section(doc, SECTION_MICRO, micro_markdown(rows, bl.machine(), bl.git_commit()))
            print(f"wrote {doc}")
    print(f"took {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
