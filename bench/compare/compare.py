#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Side by side, in one session, on the same generated datasets, cold and warm
cache: the device limit, dlfeed from C++, dlfeed from Python, PyTorch's
DataLoader over h5py / numpy readers (0, 2 and 4 workers, shuffle on) and
tf.data (TFRecordDataset, interleave, shuffle buffer, batch, prefetch).

Each run is its own process (bench/compare/compare_cpp.cc for C++,
bench/compare/runners.py for the rest) with the same protocol: warm-up
batches, settle, drop the files' pages when cold, then one timed epoch whose
every sample is touched. Systems alternate within a round (the running order
rotates each round); medians over rounds. Peak RSS is of the whole process
tree (DataLoader workers included), sampled from /proc.

    .venv/bin/python bench/compare/compare.py            # writes docs/performance.md and docs/img/compare_*.png
    .venv/bin/python bench/compare/compare.py --quick    # tiny data, one round, prints only (about a minute)

Build first: BUILD_TARGETS="dlfeed_cli raw_read compare_cpp _dlfeed" scripts/setup.sh
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _benchlib as bl  # noqa: E402

COMPARE_CPP = bl.BUILD / "bench" / "compare_cpp"
RUNNERS = HERE / "runners.py"
SECTION = "bench/compare"
COMMAND = ".venv/bin/python bench/compare/compare.py"


@dataclass
class System:
    key: str          # unique within a scenario
    label: str        # in tables and charts
    kind: str         # device | cpp | py
    runner: str = ""  # runners.py system
    workers: int = 0
    needs: tuple = ()  # Python modules it imports


@dataclass
class Scenario:
    key: str
    title: str
    gen: List
    quick_gen: List
    sub: str                   # dataset folder under the generated dir
    fields: List[str]
    sample_bytes: int          # bytes of the sample's main field
    strategy: str
    systems: List[System]
    device_name: str = ""      # raw_read --name
    params: Dict[str, int] = field(default_factory=dict)
    note: str = ""


def torch_systems(runner: str, reader: str) -> List[System]:
    mods = ("torch", "h5py") if reader == "h5py" else ("torch",)
    return [System(f"{runner}_w{w}", f"PyTorch DataLoader + {reader}, {w} workers", "py", runner, w, mods)
            for w in (0, 2, 4)]


DEVICE = System("device", bl.DEVICE_LABEL, "device")
CPP = System("dlfeed_cpp", "dlfeed, C++", "cpp")
PY = System("dlfeed_py", "dlfeed, Python (dlfeed.Loader)", "py", "dlfeed_py")

SCENARIOS = [
    Scenario(
        key="hdf5", title="HDF5, 128 KiB samples, global shuffle",
        gen=["--format", "hdf5", "--layout", "dlio", "--files", 8, "--samples-per-file", 512, "--shape", "128,1024"],
        quick_gen=["--format", "hdf5", "--layout", "dlio", "--files", 2, "--samples-per-file", 64,
                   "--shape", "128,1024"],
        sub="train", fields=["records_0", "labels"], sample_bytes=128 << 10, strategy="global_shuffle",
        device_name="records_0",
        systems=[DEVICE, CPP, PY,
                 System("dlfeed_torch", "dlfeed, PyTorch (dlfeed.torch.Dataset)", "py", "dlfeed_torch",
                        needs=("torch",)),
                 *torch_systems("torch_h5py", "h5py")],
        note="DLIO layout (records_0 uint8 128x1024 and labels int64 per sample); PyTorch: shuffle=True "
             "(a uniform permutation, as global_shuffle)"),
    Scenario(
        key="npy", title="NPY, 128 KiB samples, global shuffle",
        gen=["--format", "npy", "--files", 8, "--samples-per-file", 256, "--shape", "128,1024"],
        quick_gen=["--format", "npy", "--files", 2, "--samples-per-file", 64, "--shape", "128,1024"],
        sub="", fields=[], sample_bytes=128 << 10, strategy="global_shuffle",
        systems=[DEVICE, CPP, PY, *torch_systems("torch_npy", "numpy mmap")],
        note="one array per file, samples on the first axis; PyTorch: np.load(mmap_mode='r') per worker, "
             "each sample copied out"),
    Scenario(
        key="tfrecord", title="TFRecord, 32 KiB samples, 10,000-sample shuffle buffer",
        gen=["--format", "tfrecord", "--layout", "dlio", "--files", 16, "--samples-per-file", 1024,
             "--shape", "32768"],
        quick_gen=["--format", "tfrecord", "--layout", "dlio", "--files", 4, "--samples-per-file", 64,
                   "--shape", "32768"],
        sub="train", fields=["image", "size"], sample_bytes=32 << 10, strategy="buffered_shuffle",
        params={"buffer_size": 10000},
        systems=[DEVICE, CPP, PY,
                 System("dlfeed_tf", "dlfeed, TensorFlow (dlfeed.tf.dataset)", "py", "dlfeed_tf",
                        needs=("tensorflow",)),
                 System("tf_data", "tf.data (interleave, shuffle 10k, prefetch)", "py",
                        "tf_data", needs=("tensorflow",))],
        note="DLIO layout (Examples with image: 32 KiB bytes and size: int64); dlfeed: buffered_shuffle with "
             "a 10,000-sample buffer over a file shuffle; tf.data: the files shuffled, interleaved "
             "(AUTOTUNE), shuffle(10000), batch, parse_example + decode_raw (vectorized map), prefetch(AUTOTUNE)"),
]


def available(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


def run_system(sc: Scenario, sys_: System, path: pathlib.Path, cold: bool, a) -> Dict:
    if sys_.kind == "device":
        d = bl.device_limit(path, sc.strategy, cold, name=sc.device_name, params=sc.params, epoch=1,
                            max_seconds=a.device_seconds)
        r, peak = {"samples": d["samples"], "seconds": d["seconds"], "reader": d["reader"]}, d["peak_rss_kib"]
    elif sys_.kind == "cpp":
        cmd = [COMPARE_CPP, "--batch-size", a.batch_size, "--strategy", sc.strategy,
               "--warmup-batches", a.warmup_batches, "--settle-s", a.settle_s]
        if sc.fields:
            cmd += ["--fields", ",".join(sc.fields)]
        for k, v in sc.params.items():
            cmd += [f"--{k.replace('_', '-')}", v]
        if cold:
            cmd.append("--cold")
        cmd.append(path)
        out, peak = bl.run_measured(cmd)
        r = json.loads(out.strip().splitlines()[-1])
    else:
        cmd = [sys.executable, RUNNERS, sys_.runner, "--data", path, "--batch-size", a.batch_size,
               "--strategy", sc.strategy, "--workers", sys_.workers, "--warmup-batches", a.warmup_batches,
               "--settle-s", a.settle_s, "--buffer-size", sc.params.get("buffer_size", 10000)]
        if sc.fields:
            cmd += ["--fields", ",".join(sc.fields)]
        if cold:
            cmd.append("--cold")
        env = dict(os.environ, PYTHONPATH=bl.PYTHONPATH, TF_CPP_MIN_LOG_LEVEL="2")
        out, peak = bl.run_measured(cmd, env=env)
        r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_kib"] = peak
    r["samples_s"] = r["samples"] / r["seconds"]
    r["mib_s"] = r["samples_s"] * sc.sample_bytes / 2**20
    return r


def measure(a) -> Dict:
    data_root = pathlib.Path(a.data) / ("quick" if a.quick else "full")
    caches = [c for c in a.caches.split(",") if c]
    results: Dict = {"machine": bl.machine(), "commit": bl.git_commit(), "quick": a.quick,
                     "rounds": a.rounds, "settle_s": a.settle_s, "warmup_batches": a.warmup_batches,
                     "batch_size": a.batch_size,
                     "device_source": bl.DEVICE_LIMIT_SOURCE.format(max_seconds=a.device_seconds),
                     "scenarios": {}, "skipped": []}
    wanted = set(a.scenarios.split(",")) if a.scenarios else None
    for sc in SCENARIOS:
        if wanted and sc.key not in wanted:
            continue
        gen_dir = data_root / sc.key
        if bl.generate(gen_dir, sc.quick_gen if a.quick else sc.gen):
            print(f"generated {gen_dir}", flush=True)
        path = gen_dir / sc.sub if sc.sub else gen_dir
        systems = []
        workers = {int(w) for w in a.workers.split(",") if w}
        for s in sc.systems:
            if s.runner.startswith("torch_") and s.workers not in workers:
                continue
            missing = [m for m in s.needs if not available(m)]
            if missing:
                results["skipped"].append(f"{sc.key}/{s.key}: {', '.join(missing)} not installed")
            else:
                systems.append(s)
        runs: Dict[str, Dict[str, List[Dict]]] = {c: {s.key: [] for s in systems} for c in caches}
        for rnd in range(a.rounds):
            for cache in caches:
                cold = cache == "cold"
                if not cold:
                    bl.warm([path])
                for s in bl.rotated(systems, rnd):
                    r = run_system(sc, s, path, cold, a)
                    runs[cache][s.key].append(r)
                    print(f"[{sc.key} {cache} round {rnd + 1}/{a.rounds}] {s.label}: {r['samples_s']:,.0f} samples/s "
                          f"({r['mib_s']:,.0f} MiB/s), peak RSS {r['peak_rss_kib'] / 1024:,.0f} MiB", flush=True)
        results["scenarios"][sc.key] = {
            "title": sc.title, "path": str(path.relative_to(bl.ROOT) if path.is_relative_to(bl.ROOT) else path),
            "gen": " ".join(map(str, sc.quick_gen if a.quick else sc.gen)), "fields": sc.fields,
            "strategy": sc.strategy, "params": sc.params, "note": sc.note,
            "systems": [{"key": s.key, "label": s.label, "kind": s.kind} for s in systems],
            "runs": runs}
    results["machine"]["load_end"] = f"{os.getloadavg()[0]:.1f}"
    return results


def summarize(results: Dict) -> Dict:
    """Medians per scenario, cache and system, efficiency against the device."""
    out = {}
    for key, sc in results["scenarios"].items():
        table = {}
        for cache, per_sys in sc["runs"].items():
            dev = bl.median([r["samples_s"] for r in per_sys.get("device", [])])
            for skey, runs in per_sys.items():
                if not runs:
                    continue
                sps = bl.median([r["samples_s"] for r in runs])
                table.setdefault(skey, {})[cache] = {
                    "samples_s": sps,
                    "mib_s": bl.median([r["mib_s"] for r in runs]),
                    "eff": sps / dev if dev == dev and dev > 0 else float("nan"),
                    "peak_rss_mib": bl.median([r["peak_rss_kib"] for r in runs]) / 1024,
                    "rounds": [round(r["samples_s"]) for r in runs],
                    "touch": sorted({r.get("touch") for r in runs if r.get("touch") is not None}),
                }
        out[key] = table
    return out


def check_same_samples(results: Dict, summary: Dict) -> List[str]:
    """Every system's order-independent touch sum must agree within a scenario."""
    problems = []
    for key, table in summary.items():
        seen = {}
        for skey, caches in table.items():
            for cache, m in caches.items():
                for t in m["touch"]:
                    seen.setdefault(t, []).append(f"{skey}/{cache}")
        if len(seen) > 1:
            problems.append(f"{key}: systems delivered different bytes: {seen}")
    return problems


def goals(results: Dict, summary: Dict) -> List[Dict]:
    rows = []
    h = summary.get("hdf5", {})
    if "cold" in h.get("dlfeed_cpp", {}):
        cpp = h["dlfeed_cpp"]["cold"]
        rows.append({"goal": "Cold global shuffle, 128 KiB HDF5: dlfeed at least 90% of the device limit",
                     "measured": f"C++ {cpp['eff']:.0%}, Python {h['dlfeed_py']['cold']['eff']:.0%} of "
                                 f"{h['device']['cold']['samples_s']:,.0f} samples/s",
                     "met": cpp["eff"] >= 0.9})
        torch_keys = [k for k in h if k.startswith("torch_h5py") and "cold" in h[k]]
        if torch_keys:
            best = max(torch_keys, key=lambda k: h[k]["cold"]["samples_s"])
            ratio = h["dlfeed_py"]["cold"]["samples_s"] / h[best]["cold"]["samples_s"]
            ratio_cpp = cpp["samples_s"] / h[best]["cold"]["samples_s"]
            rows.append({"goal": "... and at least 5x PyTorch DataLoader + h5py at its best worker count",
                         "measured": f"Python {ratio:.1f}x, C++ {ratio_cpp:.1f}x the best "
                                     f"({best.rsplit('_w', 1)[1]} workers, "
                                     f"{h[best]['cold']['samples_s']:,.0f} samples/s)",
                         "met": ratio >= 5})
    t = summary.get("tfrecord", {})
    if "tf_data" in t:
        for cache in ("cold", "warm"):
            if cache not in t["tf_data"]:
                continue
            tf_ = t["tf_data"][cache]
            for k in ("dlfeed_py", "dlfeed_tf"):
                if cache not in t.get(k, {}):
                    continue
                d = t[k][cache]
                ratio = d["samples_s"] / tf_["samples_s"]
                less = d["peak_rss_mib"] < tf_["peak_rss_mib"]
                rows.append({"goal": f"TFRecord, 10k shuffle buffer, {cache}: {label_of(results, 'tfrecord', k)} "
                                     "at least 1.5x tf.data's samples/s, with less memory",
                             "measured": f"{ratio:.2f}x; peak RSS {d['peak_rss_mib']:,.0f} MiB vs "
                                         f"{tf_['peak_rss_mib']:,.0f} MiB",
                             "met": ratio >= 1.5 and less})
    return rows


def label_of(results: Dict, scenario: str, key: str) -> str:
    for s in results["scenarios"][scenario]["systems"]:
        if s["key"] == key:
            return s["label"]
    return key


# ---------------------------------------------------------------- report

def markdown(results: Dict, summary: Dict, goal_rows: List[Dict], img_rel: str) -> str:
    m = results["machine"]
    lines = [
        "## Side by side: dlfeed, PyTorch DataLoader, tf.data",
        "",
        f"{bl.machine_line(m)}, commit {results['commit']}, by",
        "",
        f"    {COMMAND}",
        "",
        f"Medians of {results['rounds']} round{'s' if results['rounds'] != 1 else ''}; in each round every "
        "system runs once per cache state, the running order rotated from round to round. Every system reads "
        "the same files and delivers the same samples and fields in batches of "
        f"{results['batch_size']}; each run is a fresh process that builds its "
        f"loader, reads {results.get('warmup_batches', 4)} warm-up batches, waits "
        f"{results.get('settle_s', 1.0):g} s, drops the files' cached pages (cold) or not (warm, after "
        "reading every file once), and times one whole epoch from the creation of its iterator to the last "
        "batch, touching one byte per 4 KiB of every sample of every field (the sums agree across systems, so "
        "all delivered the same bytes). *Efficiency* is samples/s over the device limit's: "
        f"{results['device_source']}, cold or warm as the row. Peak RSS: the whole process tree (DataLoader "
        "workers summed; pages shared after fork count once per process), sampled every 50 ms, the largest of "
        "cold and warm medians.",
        "",
        f"![throughput]({img_rel}/compare_throughput.png)",
        "",
        f"![efficiency]({img_rel}/compare_efficiency.png)",
        "",
    ]
    for key, sc in results["scenarios"].items():
        table = summary[key]
        lines += [f"### {sc['title']}", "",
                  f"`{sc['path']}`, generated by `dlfeed generate {sc['gen']}`. {sc['note']}.", "",
                  "| system | cold samples/s | cold MiB/s | cold efficiency | warm samples/s | warm MiB/s | "
                  "warm efficiency | peak RSS MiB | rounds, samples/s (cold; warm) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for s in sc["systems"]:
            row = table.get(s["key"], {})
            cells = []
            for cache in ("cold", "warm"):
                c = row.get(cache)
                if c is None:
                    cells += ["–", "–", "–"]
                else:
                    eff = "–" if s["kind"] == "device" else f"{c['eff']:.0%}"
                    cells += [f"{c['samples_s']:,.0f}", f"{c['mib_s']:,.0f}", eff]
            rss = max((c["peak_rss_mib"] for c in row.values()), default=float("nan"))
            spread = "; ".join(" ".join(f"{x:,}" for x in row[c]["rounds"]) for c in ("cold", "warm") if c in row)
            lines.append(f"| {s['label']} | " + " | ".join(cells) + f" | {rss:,.0f} | {spread} |")
        lines.append("")
    if goal_rows:
        lines += ["### Goals", "", "| goal | measured | met |", "|---|---|---|"]
        for g in goal_rows:
            lines.append(f"| {g['goal']} | {g['measured']} | {'yes' if g['met'] else 'no'} |")
        lines.append("")
    if results["skipped"]:
        lines += ["Not run: " + "; ".join(results["skipped"]) + ".", ""]
    if results.get("note"):
        lines += [f"Note: {results['note']}", ""]
    lines += ["All numbers of a run: `data/compare/full/results.json` (not committed); "
              f"`{COMMAND} --from-json data/compare/full/results.json` redraws this section and the charts.", ""]
    return "\n".join(lines)


def short_label(key: str) -> str:
    fixed = {"device": "device limit", "dlfeed_cpp": "dlfeed C++", "dlfeed_py": "dlfeed Python",
             "dlfeed_torch": "dlfeed.torch", "dlfeed_tf": "dlfeed.tf", "tf_data": "tf.data"}
    if key in fixed:
        return fixed[key]
    reader, w = key.rsplit("_w", 1)
    return f"PyTorch + {'h5py' if reader == 'torch_h5py' else 'numpy'} ({w} workers)"


def headline(results: Dict, summary: Dict, key: str, cache: str = "cold") -> str:
    """One line a reader takes away: the best dlfeed against the best other loader, and against the device."""
    table = summary[key]
    ours = {k: v[cache]["samples_s"] for k, v in table.items() if k.startswith("dlfeed") and cache in v}
    others = {k: v[cache]["samples_s"] for k, v in table.items()
              if not k.startswith("dlfeed") and k != "device" and cache in v}
    if not ours:
        return ""
    best = max(ours, key=ours.get)
    text = f"{cache} cache: {short_label(best)}"
    dev = table.get("device", {}).get(cache, {}).get("samples_s")
    if dev:
        text += f" at {ours[best] / dev:.0%} of the device"
    if others:
        rival = max(others, key=others.get)
        text += f", {ours[best] / others[rival]:.1f}x the best other loader, {short_label(rival)}"
    return text


def charts(results: Dict, summary: Dict, out_dir: pathlib.Path) -> List[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    keys = list(results["scenarios"])
    colors = {"cold": "#1f5fa8", "warm": "#f0a030"}
    paths = []
    m = results["machine"]
    foot = (f"{m['date']}, {m['node']} ({m['cores']} cores, 1-min load {m['load']}"
            f"{' to ' + m['load_end'] if m.get('load_end') else ''}), medians of {results['rounds']} round{'s' if results['rounds'] != 1 else ''}, batch "
            f"{results['batch_size']}; bench/compare/compare.py{' (shared machine: see the note)' if results.get('note') else ''}")
    for metric, fname in (("mib_s", "compare_throughput.png"), ("eff", "compare_efficiency.png")):
        heights = [len(results["scenarios"][k]["systems"]) for k in keys]
        fig, axes = plt.subplots(len(keys), 1, figsize=(11, 1.0 + 0.62 * sum(heights) + 1.2 * len(keys)),
                                 gridspec_kw={"height_ratios": heights}, squeeze=False)
        for ax, key in zip(axes[:, 0], keys):
            sc = results["scenarios"][key]
            systems = [s for s in sc["systems"] if not (metric == "eff" and s["kind"] == "device")]
            table = summary[key]
            ys = list(range(len(systems)))[::-1]
            vmax = 0.0
            for j, cache in enumerate(("cold", "warm")):
                vals = [table.get(s["key"], {}).get(cache, {}).get(metric, float("nan")) for s in systems]
                vals = [v * 100 if metric == "eff" else v for v in vals]
                pos = [y + (0.2 if j == 0 else -0.2) for y in ys]
                ax.barh(pos, vals, height=0.38, color=colors[cache], label=f"{cache} cache")
                for p, v in zip(pos, vals):
                    if v == v:
                        ax.text(v, p, f" {v:,.0f}{'%' if metric == 'eff' else ''}", va="center", fontsize=8)
                        vmax = max(vmax, v)
            labels = []
            for s in systems:
                lab = s["label"]
                if s["kind"] != "py" or not s["key"].startswith(("dlfeed",)):
                    pass
                labels.append(lab)
            ax.set_yticks(ys)
            ax.set_yticklabels(labels, fontsize=9)
            for t, s in zip(ax.get_yticklabels(), systems):
                if s["key"].startswith("dlfeed"):
                    t.set_fontweight("bold")
            left = matplotlib.transforms.blended_transform_factory(fig.transFigure, ax.transAxes)
            ax.annotate(sc["title"], xy=(0.01, 1), xycoords=left, xytext=(0, 20), textcoords="offset points",
                        fontsize=11, fontweight="bold", va="bottom")
            ax.annotate(headline(results, summary, key), xy=(0.01, 1), xycoords=left, xytext=(0, 5),
                        textcoords="offset points", fontsize=10, color="#b03030", va="bottom", fontweight="bold")
            ax.set_xlim(0, vmax * 1.18 if vmax > 0 else 1)
            ax.grid(axis="x", alpha=0.3)
            if metric == "eff":
                ax.axvline(90, color="#b03030", ls="--", lw=1)
                ax.text(90, ys[0] + 0.55, " 90%", color="#b03030", fontsize=8, va="bottom")
                ax.set_xlabel("efficiency: samples/s as % of the device limit (same files, same order)")
            else:
                ax.set_xlabel("throughput, MiB/s of samples delivered (higher is better)")
        axes[0, 0].legend(loc="lower right", fontsize=9)
        title = ("Throughput per system: dlfeed (bold) against PyTorch, tf.data and the raw device"
                 if metric == "mib_s" else
                 "Efficiency per system: how close each loader gets to what the storage can deliver")
        fig.suptitle(title, fontsize=12, fontweight="bold", x=0.01, ha="left")
        fig.text(0.01, 0.003, foot, fontsize=7, color="#555555")
        fig.tight_layout(rect=(0, 0.015, 1, 0.97))
        p = out_dir / fname
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def print_summary(results: Dict, summary: Dict) -> None:
    for key, sc in results["scenarios"].items():
        print(f"\n{sc['title']}")
        for s in sc["systems"]:
            row = summary[key].get(s["key"], {})
            parts = [f"{c}: {v['samples_s']:>9,.0f} samples/s {v['mib_s']:>7,.0f} MiB/s "
                     f"{'' if s['kind'] == 'device' else format(v['eff'], '4.0%')} rss {v['peak_rss_mib']:,.0f} MiB"
                     for c, v in row.items()]
            print(f"  {s['label']:<62} " + " | ".join(parts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(bl.ROOT / "data" / "compare"), help="where datasets are generated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--warmup-batches", type=int, default=4)
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--device-seconds", type=float, default=5,
                    help="most seconds of each cold device measurement (dlfeed calibrate --max-seconds)")
    ap.add_argument("--caches", default=None, help="cold, warm or both (default: both; --quick: cold)")
    ap.add_argument("--workers", default="0,2,4", help="DataLoader worker counts to run")
    ap.add_argument("--scenarios", default="", help="comma-separated subset of: "
                    + ", ".join(s.key for s in SCENARIOS))
    ap.add_argument("--quick", action="store_true",
                    help="tiny datasets, one round, short settle; prints, writes no docs")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--from-json", help="measure nothing: redraw the tables and charts from a results.json")
    ap.add_argument("--note", help="a remark printed with the results (e.g. what else ran on the machine)")
    ap.add_argument("--doc", default=str(bl.ROOT / "docs" / "performance.md"))
    ap.add_argument("--img-dir", default=str(bl.ROOT / "docs" / "img"))
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.settle_s, a.warmup_batches = 1, 0.2, 2
    if a.caches is None:
        a.caches = "cold" if a.quick else "cold,warm"
    bl.require(bl.DLFEED, bl.RAW, COMPARE_CPP, targets="dlfeed_cli raw_read compare_cpp _dlfeed")
    if not list((bl.BUILD / "python" / "dlfeed").glob("_dlfeed*.so")):
        sys.exit("missing build/python/dlfeed/_dlfeed*.so: build the _dlfeed target")

    t0 = time.time()
    if a.from_json:
        results = json.loads(pathlib.Path(a.from_json).read_text())
        a.quick = results["quick"]
    else:
        results = measure(a)
    if a.note:
        results["note"] = a.note
    summary = summarize(results)
    goal_rows = goals(results, summary)
    problems = check_same_samples(results, summary)
    print_summary(results, summary)
    for g in goal_rows:
        print(f"goal: {g['goal']}: {g['measured']}: {'met' if g['met'] else 'NOT met'}")
    for s in results["skipped"]:
        print(f"skipped: {s}")
    for p in problems:
        print(f"ERROR: {p}")
    print(f"took {time.time() - t0:.0f} s")
    results["summary"] = summary
    results["goals"] = goal_rows
    out_dir = pathlib.Path(a.data) / ("quick" if a.quick else "full")
    if not a.from_json:
        bl.dump_json(pathlib.Path(a.json) if a.json else out_dir / "results.json", results)
    if problems:
        pass
    elif a.quick:  # charts next to the data, the section on stdout; docs untouched
        for p in charts(results, summary, out_dir):
            print(f"wrote {p}")
        print(markdown(results, summary, goal_rows, "img"))
    else:
        doc = pathlib.Path(a.doc)
        img = pathlib.Path(a.img_dir)
        for p in charts(results, summary, img):
            print(f"wrote {p}")
        bl.replace_section(doc, SECTION, markdown(results, summary, goal_rows, os.path.relpath(img, doc.parent)))
        print(f"wrote {doc}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
