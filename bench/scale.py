#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Scale: how the index build (first open), the reopen and the peak RSS of
opening a dataset grow with its files and with its samples (issue 16).

Each point is `dlfeed run --epochs 0 --resident off --summary-json` over a
dataset `dlfeed generate` wrote with tiny samples: the "open" span of the
summary is open_dataset (listing the folder, indexing every file); the peak
RSS is the process's (os.wait4). *First open*: the page, inode and dentry
caches dropped before (`echo 3 > /proc/sys/vm/drop_caches`, as root; without
root only the files' pages are dropped, with posix_fadvise, and the table
says so). *Reopen*: the same command again at once, everything cached.

Two series, for TFRecord (DLIO layout, with .idx sidecars), HDF5, NPZ, NPY:
  files:   10^2 .. 10^5 files of 1 sample (--files-max);
  samples: 4 files of 10^4 .. 10^7 samples in all (--samples-max).

    .venv/bin/python bench/scale.py --base /tmp/base/build   # before/after; docs/performance.md + docs/img/scale_*.png
    .venv/bin/python bench/scale.py --quick                  # small, warm only, prints (under a minute)
    .venv/bin/python bench/scale.py --million --formats npy  # the 10^6-file point alone, its own section

Each point also reopens from the index cache (the new build only): `--index-cache
auto` once to write it, then the reopen with `--index-cache-check files` (a
stat per file) and with `folders` (a stat per folder: the cached listing).
A folder changed under 2 s before a listing is not trusted by its mtime, so
each dataset rests 2.1 s after it is written and after its cache is removed.

Datasets go under --data (default /tmp/scale-data), one at a time, and are
deleted after their points unless --keep (the 10^5-file ones take ~0.4-0.8 GB
each on disk).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import _benchlib as bl
from _benchlib import DLFEED, ROOT

FORMATS = ["tfrecord", "hdf5", "npz", "npy"]
LABEL = {"tfrecord": "TFRecord (+.idx)", "hdf5": "HDF5", "npz": "NPZ", "npy": "NPY"}
SECTION = "bench/scale"
SETTLE_S = 2.1  # a folder changed under 2 s before a listing is not trusted by its mtime; 0 with --quick


def gen_args(fmt: str, files: int, per_file: int) -> List:
    # One uint8 element per sample (4 for HDF5/NPY/NPZ rows, 16 bytes of
    # image for TFRecord): the index, not the data, is what is measured.
    args: List = ["--format", fmt, "--files", files, "--samples-per-file", per_file, "--dtype", "uint8"]
    if fmt == "tfrecord":
        return args + ["--layout", "dlio", "--shape", "16"]  # train/ + index/train/NAME.idx, as DLIO writes
    return args + ["--shape", "4"]


def data_path(root: pathlib.Path, fmt: str) -> pathlib.Path:
    return root / "train" if fmt == "tfrecord" else root


def can_drop_caches() -> bool:
    if os.geteuid() != 0:
        return False
    try:  # root in a container may still be refused
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def drop_caches(path: pathlib.Path, root_ok: bool) -> None:
    if root_ok:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    else:
        bl.evict([path])


def open_once(binary: pathlib.Path, path: pathlib.Path, extra: Optional[List] = None) -> Dict[str, float]:
    """One `dlfeed run --epochs 0`: open span (s), process wall (s), peak RSS (MiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        js = pathlib.Path(tmp) / "summary.json"
        t = time.perf_counter()
        _, peak_kib = bl.run_measured([binary, "run", "--epochs", 0, "--resident", "off", "--quiet",
                                       "--summary-json", js, *(extra or []), path], timeout=3600)
        wall = time.perf_counter() - t
        summary = json.loads(js.read_text())
    return {"open_s": summary["counters"]["open_ns"]["value"] / 1e9, "wall_s": wall, "rss_mib": peak_kib / 1024}


def measure(binaries: Dict[str, pathlib.Path], path: pathlib.Path, repeats: int, cold: bool, root_ok: bool
            ) -> Dict[str, Dict[str, float]]:
    """Per build: medians of first open (cold when `cold`) and reopen (warm)."""
    metrics = ["first_s", "reopen_s", "rss_mib", "wall_s", "cache_write_s", "cached_files_s", "cached_folders_s",
               "cached_folders_wall_s"]
    got: Dict[str, Dict[str, List[float]]] = {k: {m: [] for m in metrics} for k in binaries}
    for r in range(repeats):
        for key in bl.rotated(list(binaries), r):
            if cold:
                drop_caches(path, root_ok)
            first = open_once(binaries[key], path)
            again = open_once(binaries[key], path)
            got[key]["first_s"].append(first["open_s"])
            got[key]["wall_s"].append(first["wall_s"])
            got[key]["reopen_s"].append(again["open_s"])
            got[key]["rss_mib"].append(max(first["rss_mib"], again["rss_mib"]))
            if key != "new":
                continue
            # The index cache: written, then reopened with each check.
            shutil.rmtree(path / ".dlfeed", ignore_errors=True)
            time.sleep(SETTLE_S)  # the folder settles (a change under 2 s old is not trusted by its mtime)
            cache = ["--index-cache", "auto"]
            got[key]["cache_write_s"].append(open_once(binaries[key], path, cache)["open_s"])
            got[key]["cached_files_s"].append(
                open_once(binaries[key], path, cache + ["--index-cache-check", "files"])["open_s"])
            folders = open_once(binaries[key], path, cache + ["--index-cache-check", "folders"])
            got[key]["cached_folders_s"].append(folders["open_s"])
            got[key]["cached_folders_wall_s"].append(folders["wall_s"])
            shutil.rmtree(path / ".dlfeed", ignore_errors=True)
    return {k: {m: bl.median(v) for m, v in d.items() if v} for k, d in got.items()}


def run_series(name: str, points: List[Dict], binaries, data: pathlib.Path, a, root_ok: bool) -> List[Dict]:
    rows = []
    for p in points:
        root = data / f"{name}-{p['format']}-{p['files']}x{p['per_file']}"
        t = time.perf_counter()
        bl.generate(root, gen_args(p["format"], p["files"], p["per_file"]), dlfeed=binaries["new"])
        gen_s = time.perf_counter() - t
        time.sleep(SETTLE_S)  # the folders settle (see the index cache's listing check)
        samples = p["files"] * p["per_file"]
        big = p["files"] > 10_000 or samples > 1_000_000
        repeats = 1 if (a.quick or big) else a.repeats
        res = measure(binaries, data_path(root, p["format"]), repeats, a.cold, root_ok)
        row = {**p, "samples": samples, "repeats": repeats, "gen_s": gen_s, "results": res}
        rows.append(row)
        per = (p["files"], "files") if name == "files" else (samples, "samples")
        parts = [f"{k}: first {v['first_s']:.3f} s ({per[0] / v['first_s']:,.0f} {per[1]}/s), reopen "
                 f"{v['reopen_s']:.3f} s, RSS {v['rss_mib']:.0f} MiB"
                 + (f", cache: write {v['cache_write_s']:.3f} s, reopen checking files {v['cached_files_s']:.3f} s, "
                    f"folders {v['cached_folders_s']:.3f} s (process {v['cached_folders_wall_s']:.2f} s)"
                    if "cached_folders_s" in v else "") for k, v in res.items()]
        print(f"{name} {LABEL[p['format']]} {p['files']:,} files x {p['per_file']:,}: " + "; ".join(parts),
              flush=True)
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def plot(rows: List[Dict], x_key: str, x_label: str, out: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    metrics = [("first_s", "first open (s)"), ("reopen_s", "reopen, warm (s)"), ("rss_mib", "peak RSS (MiB)")]
    colors = dict(zip(FORMATS, ["tab:blue", "tab:orange", "tab:green", "tab:red"]))
    builds = sorted({k for r in rows for k in r["results"]}, key=lambda k: k != "base")
    for ax, (m, label) in zip(axes, metrics):
        for fmt in FORMATS:
            pts = [r for r in rows if r["format"] == fmt]
            if not pts:
                continue
            for build in builds:
                xs = [r[x_key] for r in pts if build in r["results"]]
                ys = [r["results"][build][m] for r in pts if build in r["results"]]
                ax.plot(xs, ys, marker="o" if build == "new" else "x", linestyle="-" if build == "new" else "--",
                        color=colors[fmt], label=f"{LABEL[fmt]} ({build})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(x_label)
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def cell(r: Dict, m: str, fmt_fn) -> str:
    res = r["results"]
    if m not in res["new"]:
        return "–"
    if "base" in res and m in res["base"]:
        return f"{fmt_fn(res['base'][m])} → {fmt_fn(res['new'][m])}"
    return fmt_fn(res["new"][m])


def table(rows: List[Dict], per: str) -> List[str]:
    has_base = any("base" in r["results"] for r in rows)
    arrow = " (base → new)" if has_base else ""
    unit = "files/s" if per == "files" else "samples/s"
    lines = [f"| format | files | samples | first open s{arrow} | {unit}, first open{arrow} | reopen s{arrow} | "
             f"peak RSS MiB{arrow} | cache: write s | reopen s, check files | reopen s, check folders "
             f"(process wall) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n = r["files"] if per == "files" else r["samples"]
        new = r["results"]["new"]
        folders = (f"{new['cached_folders_s']:.3f} ({new['cached_folders_wall_s']:.2f})"
                   if "cached_folders_s" in new else "–")
        lines.append(f"| {LABEL[r['format']]} | {r['files']:,} | {r['samples']:,} | "
                     f"{cell(r, 'first_s', lambda v: f'{v:.3f}')} | {cell(r, 'first_s', lambda v: f'{n / v:,.0f}')} | "
                     f"{cell(r, 'reopen_s', lambda v: f'{v:.3f}')} | {cell(r, 'rss_mib', lambda v: f'{v:,.0f}')} | "
                     f"{cell(r, 'cache_write_s', lambda v: f'{v:.3f}')} | "
                     f"{cell(r, 'cached_files_s', lambda v: f'{v:.3f}')} | {folders} |")
    return lines


def one_sample_hdf5(binary: pathlib.Path, a) -> None:
    """Issue 26: N one-sample HDF5 files (DeepCAM's shape of dataset: one sample per
    file), start-up (open span) and one epoch, read with axis none against the same
    files read as today (axis 0, one row each): what a file costs either way."""
    n = a.one_sample_hdf5
    root = pathlib.Path(a.data) / f"one-sample-hdf5-{n}"
    t = time.perf_counter()
    bl.generate(root, ["--format", "hdf5", "--files", n, "--samples-per-file", 1, "--shape", "8,8,4",
                       "--dtype", "float32"], dlfeed=binary)
    gen_s = time.perf_counter() - t
    ways = {"axis 0": ["--axis", "first"], "axis none": ["--axis", "none"]}
    got: Dict[str, Dict[str, List[float]]] = {k: {"open_s": [], "epoch_s": [], "rss_mib": []} for k in ways}
    for r in range(a.repeats):
        for way in bl.rotated(list(ways), r):
            with tempfile.TemporaryDirectory() as tmp:
                js = pathlib.Path(tmp) / "s.json"
                _, peak = bl.run_measured([binary, "run", "--epochs", 1, "--compute-ms", 0, "--resident", "off",
                                           "--strategy", "global_shuffle", "--batch-size", 64, "--fields",
                                           "records,labels", "--quiet", "--summary-json", js, *ways[way], root],
                                          timeout=7200)
                summary = json.loads(js.read_text())
            got[way]["open_s"].append(summary["counters"]["open_ns"]["value"] / 1e9)
            got[way]["epoch_s"].append(summary["epochs"][0]["wall_s"])
            got[way]["rss_mib"].append(peak / 1024)
            print(f"  {way}: open {got[way]['open_s'][-1]:.2f} s, epoch {got[way]['epoch_s'][-1]:.2f} s", flush=True)
    med = {k: {m: bl.median(v) for m, v in d.items()} for k, d in got.items()}
    m = bl.machine()
    lines = [
        "## Scale: one-sample HDF5 files (bench/scale.py --one-sample-hdf5)",
        "",
        f"{bl.machine_line(m)}, commit {bl.git_commit()}, by",
        "",
        f"    .venv/bin/python bench/scale.py --one-sample-hdf5 {n} --repeats {a.repeats}",
        "",
        f"{n:,} HDF5 files of one (8, 8, 4) float32 sample each (`dlfeed generate --format hdf5 --samples-per-file "
        f"1`, written in {gen_s:.0f} s), warm; `dlfeed run --epochs 1 --resident off --strategy global_shuffle "
        f"--batch-size 64 --compute-ms 0 --fields records,labels`, the same files read as one sample per file (`--axis none`) and as "
        f"today (axis 0, one row each), alternating, medians of {a.repeats}. Start-up is the summary's open span "
        "(list the folder, index every file through libhdf5); the epoch is the first epoch's wall time.",
        "",
        "| read as | start-up s | files/s at start-up | epoch s | samples/s | peak RSS MiB |",
        "|---|---|---|---|---|---|",
    ]
    for way, v in med.items():
        lines.append(f"| {way} | {v['open_s']:.2f} | {n / v['open_s']:,.0f} | {v['epoch_s']:.2f} | "
                     f"{n / v['epoch_s']:,.0f} | {v['rss_mib']:,.0f} |")
    ratio_open = med["axis none"]["open_s"] / med["axis 0"]["open_s"]
    ratio_epoch = med["axis none"]["epoch_s"] / med["axis 0"]["epoch_s"]
    lines += ["", f"axis none / axis 0: start-up {ratio_open:.2f}x, epoch {ratio_epoch:.2f}x. A one-sample file "
              "costs the same libhdf5 open and metadata reads either way (axis none wraps the dataset's source: one "
              "extent, read straight into the batch); single runs spread by 10-20% on this shared 2-core VM, so "
              "compare the medians."]
    body = "\n".join(lines)
    print(body)
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    if not a.quick:
        bl.replace_section(pathlib.Path(a.doc), SECTION + "-one-sample-hdf5", body)


def resolve_binary(p: str) -> pathlib.Path:
    path = pathlib.Path(p)
    if path.is_dir():
        path = path / "tools" / "dlfeed"
    if not path.exists():
        sys.exit(f"{path}: no dlfeed binary")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="", help="build folder (or dlfeed binary) to compare against")
    ap.add_argument("--new", default=str(DLFEED), help="build folder (or dlfeed binary) measured")
    ap.add_argument("--data", default="/tmp/scale-data")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--files-max", type=int, default=100_000)
    ap.add_argument("--samples-max", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3, help="runs per point (1 for points over 10^4 files "
                                                           "or 10^6 samples)")
    ap.add_argument("--no-cold", dest="cold", action="store_false", help="do not drop caches before first opens")
    ap.add_argument("--keep", action="store_true", help="keep the generated datasets")
    ap.add_argument("--quick", action="store_true", help="10^2-10^3 files, 10^4-10^5 samples, warm; prints only")
    ap.add_argument("--million", action="store_true",
                    help="only the 10^6-file point (one run each; ~4 GB and 10^6 inodes per format, 2x for "
                         "TFRecord's sidecars), written to its own section of the doc")
    ap.add_argument("--one-sample-hdf5", type=int, default=0, metavar="N",
                    help="only: start-up and one epoch over N one-sample HDF5 files, axis none against axis 0 "
                         "(its own section of the doc)")
    ap.add_argument("--json", default="", help="results (default: DATA/scale.json)")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "performance.md"))
    ap.add_argument("--img", default=str(ROOT / "docs" / "img"))
    a = ap.parse_args()
    if a.quick:
        global SETTLE_S
        SETTLE_S = 0.0  # (the folders-check reopen then lists and checks every file)
        a.cold = False
        a.files_max = min(a.files_max, 1_000)
        a.samples_max = min(a.samples_max, 100_000)
    binaries = {"new": resolve_binary(a.new)}
    if a.base:
        binaries = {"base": resolve_binary(a.base), **binaries}
    bl.require(binaries["new"], targets="dlfeed_cli")
    if a.one_sample_hdf5:
        pathlib.Path(a.data).mkdir(parents=True, exist_ok=True)
        one_sample_hdf5(binaries["new"], a)
        return
    formats = [f for f in a.formats.split(",") if f]
    data = pathlib.Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    root_ok = can_drop_caches()
    m = bl.machine()
    print(f"{bl.machine_line(m)}, commit {bl.git_commit()}; builds: "
          + ", ".join(f"{k} {v}" for k, v in binaries.items()), flush=True)

    files_pts = [{"format": f, "files": n, "per_file": 1} for f in formats
                 for n in (100, 1_000, 10_000, 100_000, 1_000_000) if n <= a.files_max]
    samples_pts = [{"format": f, "files": 4, "per_file": n // 4} for f in formats
                   for n in (10_000, 100_000, 1_000_000, 10_000_000, 100_000_000) if n <= a.samples_max]
    if a.million:
        files_pts = [{"format": f, "files": 1_000_000, "per_file": 1} for f in formats]
        samples_pts = []
    results = {"machine": m, "commit": bl.git_commit(), "quick": a.quick, "cold": a.cold,
               "cold_how": "drop_caches" if root_ok else "fadvise", "builds": {k: str(v) for k, v in binaries.items()},
               "files": run_series("files", files_pts, binaries, data, a, root_ok),
               "samples": run_series("samples", samples_pts, binaries, data, a, root_ok)}
    m["load_end"] = f"{os.getloadavg()[0]:.1f}"
    bl.dump_json(pathlib.Path(a.json) if a.json else data / "scale.json", results)

    img = pathlib.Path(a.img) if not a.quick else data
    if not a.million:
        plot(results["files"], "files", "files (1 sample each)", img / "scale_files.png",
             "Opening N one-sample files" + (" (dashed: base)" if a.base else ""))
        plot(results["samples"], "samples", "samples (in 4 files)", img / "scale_samples.png",
             "Opening 4 files of N samples in all" + (" (dashed: base)" if a.base else ""))

    if not a.cold:
        first = "first open: the first run after generating (warm)"
    elif root_ok:
        first = "first open: page, inode and dentry caches dropped before (`echo 3 > /proc/sys/vm/drop_caches`)"
    else:
        first = ("first open: the files' pages dropped with posix_fadvise (not root: inode and dentry caches "
                 "stay warm)")
    builds = ", ".join(f"*{k}*: `{v}`" for k, v in binaries.items())
    doc = pathlib.Path(a.doc)
    rel = os.path.relpath(img, doc.parent)
    lines = [
        "## Scale: index build, reopen and memory (bench/scale.py)",
        "",
        f"{bl.machine_line(m)}, commit {results['commit']}, by",
        "",
        f"    .venv/bin/python bench/scale.py{' --base ' + a.base if a.base else ''}"
        f"{' --quick' if a.quick else ''}",
        "",
        f"Each point: `dlfeed run --epochs 0 --resident off` over a dataset of tiny samples from `dlfeed generate`; "
        f"times are the summary's `open` span (open_dataset: list the folder, index every file), the RSS is the "
        f"process's peak. {first}; reopen: the same command again at once. "
        f"{'One run per point' if a.quick else f'Medians of {a.repeats} runs (1 for points over 10^4 files or 10^6 samples)'}"
        f"{', builds alternating' if a.base else ''}. Builds: {builds}. TFRecord is DLIO's "
        "layout (train/ and index/train/NAME.idx sidecars); HDF5 contiguous, NPY and NPZ (stored) flat.",
        "",
        "### Against files (1 sample each)",
        "",
        *table(results["files"], "files"),
        "",
        f"![index build, reopen and RSS against files]({rel}/scale_files.png)",
        "",
        "### Against samples (4 files)",
        "",
        *table(results["samples"], "samples"),
        "",
        f"![index build, reopen and RSS against samples]({rel}/scale_samples.png)",
    ]
    if a.million:
        lines = [
            "## Scale: 10^6 files (bench/scale.py --million)",
            "",
            f"{bl.machine_line(m)}, commit {results['commit']}, by",
            "",
            f"    .venv/bin/python bench/scale.py --million --formats {','.join(formats)}"
            f"{' --base ' + a.base if a.base else ''}",
            "",
            f"As the section below, one run per point: {first}. Cache columns: `--index-cache auto` "
            "(indexes and writes the cache), then reopened with `--index-cache-check files` (a stat per file) "
            "and `folders` (a stat per folder, the cached file list), the process's wall time in brackets "
            "(the open, the loader's file table and order, exit).",
            "",
            *table(results["files"], "files"),
        ]
    body = "\n".join(lines)
    if a.quick:
        print(body)
    else:
        bl.replace_section(doc, SECTION + ("-million" if a.million else ""), body)
        print(f"wrote {doc}" + ("" if a.million else f" and {img}/scale_*.png"))


if __name__ == "__main__":
    main()
