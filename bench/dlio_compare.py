#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""dlfeed against the DLIO benchmark itself, on the same YAMLs and the same files.

For each workload (DLIO 2.0.0's own shipped YAMLs, scaled down with Hydra
overrides) the dataset is generated once by DLIO's generator, then DLIO's
train phase (`dlio_benchmark workload=NAME ...`) and `dlfeed dlio NAME.yaml
...` run on it with the same overrides, alternating, `--repeats` times, with
the page cache warm and cold, and with and without `computation_time`. Both
tools' numbers are read from their own summary.json (the same keys: DLIO's
StatsCounter, dlfeed's docs/dlio.md). Medians go to docs/performance.md under
"dlfeed vs DLIO itself", with the command that produced them.

DLIO runs from a virtual environment of its own (default build/dlio-venv),
created on first use: `pip install --no-deps dlio-benchmark==2.0.0`, then only
what it imports (no DALI, no CUDA; torch pinned to the CPU build). Its
TFRecord generator calls DALI's `tfrecord2idx`; a shim on PATH writes the
.idx with `dlfeed inspect --write-index` instead.

    .venv/bin/python bench/dlio_compare.py            # writes docs/performance.md (~30 min)
    .venv/bin/python bench/dlio_compare.py --quick    # two tiny workloads, warm, prints only
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import _benchlib as bl
from _benchlib import DLFEED, ROOT

DLIO_VERSION = "2.0.0"
# What DLIO 2.0.0 imports on the paths used here (the npz, hdf5 and tfrecord
# readers, the pytorch and tensorflow loaders and frameworks), found by
# running it: its other requirements (nvidia-dali-cuda110, torchaudio,
# torchvision) are never imported for these workloads. pydftracer 1.0.2 is
# needed although tracing stays off: DLIO's fallback when it is missing is
# broken (Profile() takes no positional argument). torch is pinned (unpinned,
# pip picks the multi-GB CUDA build; the project pins the same one).
DLIO_DEPS = ["pydftracer==1.0.2", "hydra-core", "omegaconf", "mpi4py", "pandas", "psutil", "h5py", "numpy",
             "Pillow", "pyyaml", "tensorflow-cpu", "torch==2.13.0"]

# The workloads: DLIO's YAML, the overrides that scale it down (the same for
# both tools), and the compute per step of the "with compute" runs. The
# record lengths, batch sizes, shuffles and loaders are the YAMLs' own unless
# listed. Compute per step ("with compute" runs): the YAML's computation_time
# where the record length is the YAML's (resnet50 224 ms, cosmoflow 3.5 ms);
# unet3d's 0.323 s scaled with its record length (2 MiB of 146.6 MB: 4.6 ms,
# so the bytes asked for per second of compute are the YAML's, 3.2 GB/s);
# bert's 0.968 s and default's 1.0 s would make each run minutes of sleep
# (and any loader keeps up with them), so 5 ms and 10 ms.
COMMON = ["++workload.workflow.checkpoint=False", "++workload.workflow.evaluation=False",
          "++workload.dataset.num_files_eval=0"]
WORKLOADS: Dict[str, Dict] = {
    "unet3d": dict(yaml="unet3d_h100", fmt="npz", compute=0.0046, overrides=[
        "++workload.dataset.num_files_train=112", "++workload.dataset.record_length=2097152",
        "++workload.dataset.record_length_stdev=1048576"],
        quick=["++workload.dataset.num_files_train=28", "++workload.dataset.record_length=262144",
               "++workload.dataset.record_length_stdev=131072"]),
    "resnet50": dict(yaml="resnet50_h100", fmt="tfrecord", compute=0.224, overrides=[
        "++workload.dataset.num_files_train=8", "++workload.dataset.num_samples_per_file=500"]),
    "cosmoflow": dict(yaml="cosmoflow_h100", fmt="tfrecord", compute=0.0035, overrides=[
        "++workload.dataset.num_files_train=128"]),
    # bert's total_training_steps (1000) is more than these files hold, which
    # DLIO refuses ("Only have enough data for 400 steps"): capped to them.
    "bert": dict(yaml="bert_v100", fmt="tfrecord", compute=0.005, overrides=[
        "++workload.dataset.num_files_train=8", "++workload.dataset.num_samples_per_file=2400",
        "++workload.train.total_training_steps=400"]),
    # DLIO's `default` YAML with format hdf5 (its 64 files, 16 samples each).
    # generation_buffer_size: DLIO's HDF5 generator draws a random array of
    # this many bytes (default 2 GB) for every file; dlfeed ignores the key.
    "hdf5": dict(yaml="default", fmt="hdf5", compute=0.010, overrides=[
        "++workload.dataset.format=hdf5", "++workload.dataset.num_samples_per_file=16",
        "++workload.dataset.generation_buffer_size=1048576"],
        quick=["++workload.dataset.format=hdf5", "++workload.dataset.num_files_train=16",
               "++workload.dataset.num_samples_per_file=16", "++workload.dataset.generation_buffer_size=1048576"]),
}
QUICK_WORKLOADS = ["hdf5", "unet3d"]

# The systems run in each round. dlfeed's default holds a dataset that fits in
# half its memory budget in memory (read once at start, outside the epochs);
# "dlfeed (read)" reads the files every epoch as DLIO does (--resident off).
# Cold runs read the files in both (--evict turns holding off).
SYSTEMS = {
    "dlio": "DLIO 2.0.0",
    "dlfeed": "dlfeed dlio",
    "dlfeed_read": "dlfeed dlio --resident off",
}


# ---------------------------------------------------------------- DLIO's venv

def venv_python(venv: pathlib.Path) -> pathlib.Path:
    return venv / "bin" / "python"


def dlio_importable(venv: pathlib.Path) -> bool:
    if not venv_python(venv).exists():
        return False
    probe = ("import dlio_benchmark.main, tensorflow, torch, h5py; "
             f"import importlib.metadata as m; assert m.version('dlio_benchmark') == '{DLIO_VERSION}'")
    proc = subprocess.run([str(venv_python(venv)), "-c", probe], capture_output=True, text=True,
                          env=clean_env())
    return proc.returncode == 0


def setup_venv(venv: pathlib.Path) -> None:
    """Creates DLIO's venv (or completes one), or exits saying what failed and how to do it by hand."""
    if dlio_importable(venv):
        return
    steps = [["python3", "-m", "venv", str(venv)],
             [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", f"dlio-benchmark=={DLIO_VERSION}"],
             [str(venv / "bin" / "pip"), "install", "-q", *DLIO_DEPS]]
    if venv_python(venv).exists():
        steps = steps[1:]
    print(f"setting up DLIO {DLIO_VERSION} in {venv} (once; downloads tensorflow-cpu and torch, ~2.5 GB)",
          flush=True)
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env())
        if proc.returncode:
            by_hand = "\n  ".join(shlex.join(c) for c in steps)
            sys.exit(f"cannot set up DLIO's venv: {shlex.join(cmd)} failed ({proc.returncode}):\n"
                     f"{(proc.stderr or proc.stdout)[-1500:]}\n"
                     f"mpi4py needs an MPI (libopenmpi-dev; scripts/setup.sh installs it). By hand:\n  {by_hand}\n"
                     f"or point --venv at a venv with dlio-benchmark=={DLIO_VERSION}.")
    if not dlio_importable(venv):
        proc = subprocess.run([str(venv_python(venv)), "-c", "import dlio_benchmark.main, tensorflow, torch"],
                              capture_output=True, text=True, env=clean_env())
        sys.exit(f"DLIO's venv {venv} was set up but does not import:\n{proc.stderr[-1500:]}")


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment for DLIO and dlfeed: nothing of the project's Python path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra or {})
    return env


def workload_dir(venv: pathlib.Path) -> pathlib.Path:
    out = subprocess.run([str(venv_python(venv)), "-c",
                          "import dlio_benchmark, os; print(os.path.dirname(dlio_benchmark.__file__))"],
                         capture_output=True, text=True, check=True, env=clean_env()).stdout.strip()
    return pathlib.Path(out) / "configs" / "workload"


def tfrecord2idx_shim(folder: pathlib.Path) -> pathlib.Path:
    """A `tfrecord2idx SRC DST` for DLIO's TFRecord generator: dlfeed scans
    SRC and writes DALI's index format (one "offset size" line per record)
    into DST's folder."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "tfrecord2idx"
    shim.write_text("#!/bin/sh\n# Written by bench/dlio_compare.py: DALI's tfrecord2idx, done by dlfeed.\n"
                    f'exec {shlex.quote(str(DLFEED))} inspect --format tfrecord --write-index '
                    '--index-dir "$(dirname "$2")" "$1" > /dev/null\n')
    shim.chmod(0o755)
    return folder


# ---------------------------------------------------------------- runs

def run_cmd(cmd: Sequence, cwd: pathlib.Path, env: Dict[str, str], timeout: float = 900) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{shlex.join(map(str, cmd))} failed ({proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout + proc.stderr


def overrides_for(w: Dict, data: pathlib.Path, quick: bool, compute: float) -> List[str]:
    return [*COMMON, *(w.get("quick", w["overrides"]) if quick else w["overrides"]),
            f"++workload.dataset.data_folder={data}", f"++workload.train.computation_time={compute}",
            "++workload.train.epochs=2"]


def generate(venv: pathlib.Path, name: str, w: Dict, data: pathlib.Path, scratch: pathlib.Path,
             quick: bool) -> bool:
    """DLIO's generator writes `data` unless a stamp says it already holds
    this workload's files. True if written."""
    ov = overrides_for(w, data, quick, 0)
    want = json.dumps([w["yaml"], ov])
    stamp = data / ".dlio_compare"
    if stamp.exists() and stamp.read_text() == want:
        return False
    if data.exists():
        shutil.rmtree(data)
    t = time.monotonic()
    env = clean_env({"PATH": f"{tfrecord2idx_shim(scratch / 'bin')}:{os.environ.get('PATH', '')}"})
    run_cmd([venv / "bin" / "dlio_benchmark", f"workload={w['yaml']}", *ov,
             "++workload.workflow.generate_data=True", "++workload.workflow.train=False",
             f"hydra.run.dir={scratch / ('gen-' + name)}"], cwd=scratch, env=env)
    files = [f for f in bl.data_files(data) if "/index/" not in f and not f.endswith(".dlio_compare")]
    if not files:
        raise RuntimeError(f"DLIO generated no files for {name} in {data}")
    stamp.write_text(want)
    mib = sum(os.path.getsize(f) for f in files) / 2**20
    print(f"{name}: DLIO generated {len(files)} files, {mib:.0f} MiB in {time.monotonic() - t:.0f} s", flush=True)
    return True


def run_system(system: str, venv: pathlib.Path, yaml: pathlib.Path, w: Dict, data: pathlib.Path,
               scratch: pathlib.Path, cold: bool, compute: float, quick: bool) -> Dict:
    """One run of `system`; its summary.json's train metrics."""
    out = pathlib.Path(tempfile.mkdtemp(prefix=f"{system}-", dir=scratch))
    ov = [*overrides_for(w, data, quick, compute), "++workload.workflow.generate_data=False",
          f"hydra.run.dir={out}"]
    if system == "dlio":
        cmd = [venv / "bin" / "dlio_benchmark", f"workload={w['yaml']}", *ov]
    else:
        flags = ["--quiet"]
        if cold:
            flags.append("--evict")
        elif system == "dlfeed_read":
            flags += ["--resident", "off"]
        cmd = [DLFEED, "dlio", *flags, yaml, *ov]
    if cold:
        bl.evict([data])
    else:
        bl.warm([data])
    t = time.monotonic()
    run_cmd(cmd, cwd=scratch, env=clean_env())
    wall = time.monotonic() - t
    summary = json.loads((out / "summary.json").read_text())
    if system == "dlio":  # steps per epoch: rank 0's per-step times, every block
        per_rank = json.loads((out / "0_output.json").read_text())
        steps = [sum(len(v) for v in per_rank[e]["proc"].values())
                 for e in sorted((k for k in per_rank if k.isdigit()), key=int)]
        setup = float("nan")
    else:
        steps = [e["steps"] for e in summary["dlfeed"]["epochs"]]
        f = summary["dlfeed"]
        # Loader::create before epoch 1 (files opened, headers or .idx read,
        # the dataset held when resident): outside dlfeed's epoch times.
        setup = f["run_s"] - f["train_s"] - f["eval_s"] - f["checkpoint_s"] - f["generate_s"]
    shutil.rmtree(out, ignore_errors=True)
    m = summary["metric"]
    return {"tput": m["train_throughput_samples_per_second"], "au": m["train_au_percentage"],
            "tput_mean": m["train_throughput_mean_samples_per_second"], "au_mean": m["train_au_mean_percentage"],
            "steps": steps, "setup_s": setup, "wall_s": wall, "keys": sorted(set(summary) - {"dlfeed"}), "metric_keys": sorted(m)}


def check_same_work(runs: List[Dict]) -> List[str]:
    """What differs between the tools' runs of one condition beyond speed:
    steps per epoch, summary.json's keys, the metric's keys."""
    notes = []
    for what in ("steps", "keys", "metric_keys"):
        seen = {}
        for r in runs:
            seen.setdefault(json.dumps(r[what]), set()).add(r["system"])
        if len(seen) > 1:
            notes.append(f"{what} differ: " + "; ".join(f"{sorted(v)}: {k}" for k, v in seen.items()))
    return notes


def setup_note(raw: Sequence[Dict]) -> str:
    """The medians of dlfeed's one-off open before epoch 1, per workload and cache."""
    parts = []
    for name in dict.fromkeys(r["workload"] for r in raw):
        for cache in ("warm", "cold"):
            for s in ("dlfeed", "dlfeed_read"):
                xs = [r["setup_s"] for r in raw if r["workload"] == name and r["cache"] == cache
                      and r["system"] == s]
                if xs:
                    parts.append(f"{name} {cache}{' held' if s == 'dlfeed' and cache == 'warm' else ''} "
                                 f"{bl.median(xs) * 1000:.0f} ms")
    return ", ".join(parts)


def headline(r: Dict, cold: bool) -> Dict[str, float]:
    """Cold: epoch 1, the one that read from storage in both tools (DLIO
    cannot drop the cache between epochs; its epoch 2 reads what epoch 1
    cached). Warm: the mean over epochs, DLIO's own headline."""
    if cold:
        return {"samples_s": r["tput"][0], "au": r["au"][0]}
    return {"samples_s": r["tput_mean"], "au": r["au_mean"]}


# ---------------------------------------------------------------- report

def fmt_pct(x: float) -> str:
    return "–" if x != x else f"{x:.1f}%"


def table(results: Dict) -> str:
    head = ("| workload | cache | compute/step | DLIO samples/s | dlfeed samples/s | ratio | "
            "dlfeed --resident off | ratio | DLIO AU | dlfeed AU | runs |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for key, row in results.items():
        med = row["median"]
        d, f, fr = med.get("dlio", {}), med.get("dlfeed", {}), med.get("dlfeed_read", {})
        nan = float("nan")
        ds, fs, frs = d.get("samples_s", nan), f.get("samples_s", nan), fr.get("samples_s", nan)
        ratio = (lambda a: f"{a / ds:.1f}×" if ds == ds and a == a and ds > 0 else "–")
        comp = f"{row['compute'] * 1000:g} ms" if row["compute"] else "0"
        au = (lambda x: fmt_pct(x) if row["compute"] else "0 (no compute)")
        label = row["workload"] if row["workload"] != row["fmt"] else "default"  # DLIO's default.yaml as HDF5
        lines.append(f"| {label} ({row['fmt']}) | {row['cache']} | {comp} | {bl.fmt_num(ds)} | "
                     f"{bl.fmt_num(fs)} | {ratio(fs)} | {bl.fmt_num(frs) if fr else '(as dlfeed)'} | "
                     f"{ratio(frs) if fr else ''} | {au(d.get('au', nan))} | {au(f.get('au', nan))} | "
                     f"{row['runs']} |")
    return head + "\n".join(lines) + "\n"


def markdown(results: Dict, cmd: str, m: Dict[str, str], scale: str, venv_note: str,
             mismatches: Sequence[str], setup: str) -> str:
    differ = ("\nWhat differed between the tools' runs besides speed (steps per epoch, "
              "summary.json's keys):\n\n" + "\n".join(f"- {x}" for x in mismatches) + "\n"
              if mismatches else "\nBoth tools ran the same steps per epoch in every run, and their "
              "summary.json files have the same keys (dlfeed's adds `dlfeed`).\n")
    return f"""## dlfeed vs DLIO itself (bench/dlio_compare.py)

    {cmd}

{bl.machine_line(m)}; dlfeed at {bl.git_commit()}. {venv_note}

The DLIO benchmark's own shipped YAMLs (`dlio_benchmark/configs/workload/`),
scaled down with Hydra overrides, run by DLIO 2.0.0 (`dlio_benchmark
workload=NAME ...`) and by `dlfeed dlio NAME.yaml ...` with the same
overrides, on the same files: each dataset was written once by DLIO's own
generator (its TFRecord `.idx` files by dlfeed, standing in for DALI's
`tfrecord2idx`). Every number is read from the tool's own `summary.json`.
Systems alternate within each round (the order rotates), medians of the
rounds; the machine's 2 cores are shared with other work, so single runs move
by tens of percent.

- **warm**: the files read once before each run (page cache warm); the
  number is the summary's mean over the 2 epochs
  (`train_throughput_mean_samples_per_second`, `train_au_mean_percentage`),
  DLIO's headline. dlfeed's default holds a dataset that fits in half its
  memory budget in memory (read once before the first epoch); `--resident
  off` reads the files every epoch, as DLIO does.
- **cold**: the dataset's cached pages dropped before each run
  (`posix_fadvise(DONTNEED)`; the VM's host may still cache); the number is
  epoch 1's, the epoch that read from storage in both (DLIO cannot drop the
  cache between epochs; dlfeed runs with `--evict`, so holding is off).
- **compute/step**: `computation_time` per step; AU is each tool's
  `train_au_percentage` (DLIO's formula in both: compute time over step time,
  leaving out each epoch's first step). With no compute AU is 0 in both.
- What each tool's epoch time holds: DLIO's includes its file opens (every
  file, every epoch) and, in epoch 1, its loader's start (PyTorch worker
  processes forked, or the tf.data pipeline built); dlfeed's leaves out
  its one-off open before epoch 1 (files opened, headers or `.idx` read, and
  when held the dataset read into memory), medians: {setup}.
- Scale (overrides beyond the output and data folders, `epochs=2`,
  checkpoint and evaluation off): {scale}

{table(results)}{differ}"""


def scale_note(names: Sequence[str], quick: bool) -> str:
    parts = []
    for n in names:
        w = WORKLOADS[n]
        ov = w.get("quick", w["overrides"]) if quick else w["overrides"]
        parts.append(f"{n} (`{w['yaml']}.yaml`): " + ", ".join(
            f"`{o.replace('++workload.', '')}`" for o in ov))
    return "; ".join(parts) + "."


def chart(results: Dict, m: Dict[str, str], path: pathlib.Path) -> None:
    """Left: dlfeed's samples/s over DLIO's with no compute (log scale);
    right: AU with compute, both tools. Medians, as the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["workload"] for r in results.values()))
    labels = [n if n != "hdf5" else "default (hdf5)" for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.9 + 0.75 * len(names)))
    colors = {("warm", "dlio"): "#f3c27a", ("warm", "dlfeed"): "#e08a00", ("cold", "dlio"): "#9cb8de",
              ("cold", "dlfeed"): "#1f5fa8"}
    ys = list(range(len(names)))[::-1]
    for j, cache in enumerate(("warm", "cold")):
        vals = []
        for n in names:
            med = results.get(f"{n}/{cache}/off", {}).get("median", {})
            d, f = med.get("dlio", {}).get("samples_s"), med.get("dlfeed", {}).get("samples_s")
            vals.append(f / d if d and f else float("nan"))
        pos = [y + (0.2 if j == 0 else -0.2) for y in ys]
        ax1.barh(pos, vals, height=0.38, color=colors[(cache, "dlfeed")], label=f"{cache} cache")
        for p_, v in zip(pos, vals):
            if v == v:
                ax1.text(v, p_, f" {v:.1f}×" if v < 100 else f" {v:,.0f}×", va="center", fontsize=8)
    ax1.set_xscale("log")
    ax1.axvline(1, color="#555555", lw=1)
    ax1.set_yticks(ys)
    ax1.set_yticklabels(labels)
    ax1.set_xlabel("dlfeed samples/s ÷ DLIO samples/s, no compute (log scale)")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_xlim(0.5, ax1.get_xlim()[1] * 4)
    ax1.grid(axis="x", alpha=0.3)
    k = 0
    for cache in ("warm", "cold"):
        for system in ("dlio", "dlfeed"):
            vals = [results.get(f"{n}/{cache}/on", {}).get("median", {}).get(system, {}).get("au", float("nan"))
                    for n in names]
            pos = [y + 0.3 - 0.2 * k for y in ys]
            ax2.barh(pos, vals, height=0.19, color=colors[(cache, system)],
                     label=f"{'DLIO' if system == 'dlio' else 'dlfeed'}, {cache}")
            for p_, v in zip(pos, vals):
                if v == v:
                    ax2.text(v, p_, f" {v:.1f}%", va="center", fontsize=7)
            k += 1
    comp = {n: next((r["compute"] for r in results.values() if r["workload"] == n and r["compute"]), 0)
            for n in names}
    ax2.set_yticks(ys)
    ax2.set_yticklabels([f"{lab}, {comp[n] * 1000:g} ms" for lab, n in zip(labels, names)])
    ax2.set_xlim(0, 118)
    ax2.set_xlabel("AU % with computation_time per step (higher is better)")
    ax2.legend(loc="lower left", fontsize=7)
    ax2.grid(axis="x", alpha=0.3)
    fig.suptitle("dlfeed dlio against DLIO 2.0.0: the same YAMLs, the same DLIO-generated files", fontsize=12,
                 fontweight="bold", x=0.01, ha="left")
    runs = max((r["runs"] for r in results.values()), default=0)
    fig.text(0.01, 0.005, f"{m['date']}, {m['node']} ({m['cores']} cores, 1-min load {m['load']}"
             f"{' to ' + m['load_end'] if m.get('load_end') else ''}), medians of {runs} alternating runs; "
             "bench/dlio_compare.py", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def shown_command() -> str:
    """The command as run, less where the raw results went."""
    shown, skip = [], False
    for a in sys.argv[1:]:
        if skip or a.startswith("--json") or a.startswith("--from-json"):
            skip = a in ("--json", "--from-json")
            continue
        shown.append(a)
    return shlex.join([".venv/bin/python", "bench/dlio_compare.py", *shown])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default=os.environ.get("DLIO_VENV", str(bl.BUILD / "dlio-venv")),
                    help="DLIO's virtual environment (created when missing)")
    ap.add_argument("--data", default=str(ROOT / "data" / "dlio_compare"))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {','.join(WORKLOADS)}")
    ap.add_argument("--caches", default="warm,cold")
    ap.add_argument("--compute", default="off,on", help="off: computation_time 0; on: the workload's")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true",
                    help=f"{' and '.join(QUICK_WORKLOADS)} at a tiny scale, warm, no compute, one round; prints only")
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    ap.add_argument("--png", default=str(ROOT / "docs" / "img" / "dlio_compare.png"),
                    help="the chart, written with the section ('' for none)")
    ap.add_argument("--json", default="", help="also write the raw results here")
    ap.add_argument("--from-json", default="", help="render the section from a --json file instead of running")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave docs/ alone")
    args = ap.parse_args()
    if args.from_json:
        rep = json.loads(pathlib.Path(args.from_json).read_text())
        rep.setdefault("cmd", ".venv/bin/python bench/dlio_compare.py")
        rep.setdefault("quick", False)
        rep.setdefault("mismatches", [])
        rep.setdefault("venv_note", f"DLIO {DLIO_VERSION} from PyPI in its own venv (`--no-deps`, then "
                                    f"{', '.join(DLIO_DEPS)}).")
    else:
        rep = run_all(args)
    names = list(dict.fromkeys(r["workload"] for r in rep["results"].values()))
    body = markdown(rep["results"], rep["cmd"], rep["machine"], scale_note(names, rep["quick"]),
                    rep["venv_note"], rep["mismatches"], setup_note(rep["runs"]))
    if args.quick or args.no_write:
        print(body)
        return
    if args.png:
        png = pathlib.Path(args.png)
        chart(rep["results"], rep["machine"], png)
        rel = os.path.relpath(png, pathlib.Path(args.out).resolve().parent)
        body += f"\n![dlfeed vs DLIO]({rel})\n"
        print(f"wrote {png}")
    bl.replace_section(pathlib.Path(args.out), "dlio-compare", body)
    print(f"wrote the section to {args.out}")


def run_all(args) -> Dict:
    """Generates and runs everything `args` asks for; the report's data."""
    bl.require(DLFEED, targets="dlfeed_cli")
    if args.quick:
        args.workloads, args.caches, args.compute, args.repeats = ",".join(QUICK_WORKLOADS), "warm", "off", 1
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        sys.exit(f"unknown workload(s) {unknown}: expected some of {list(WORKLOADS)}")
    systems = [s for s in args.systems.split(",") if s]
    venv = pathlib.Path(args.venv).resolve()
    setup_venv(venv)
    configs = workload_dir(venv)
    data_root = pathlib.Path(args.data).resolve() / ("quick" if args.quick else "full")
    data_root.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dlio_compare-"))
    pyver = subprocess.run([str(venv_python(venv)), "-c", "import platform; print(platform.python_version())"],
                           capture_output=True, text=True, env=clean_env()).stdout.strip()
    rep = {"results": {}, "runs": [], "machine": bl.machine(), "mismatches": [], "cmd": shown_command(),
           "quick": args.quick,
           "venv_note": (f"DLIO {DLIO_VERSION} from PyPI in its own venv (`--no-deps`, then "
                         f"{', '.join(DLIO_DEPS)}; Python {pyver}).")}
    results, raw, mismatches = rep["results"], rep["runs"], rep["mismatches"]
    try:
        for name in names:
            w = WORKLOADS[name]
            data = data_root / name
            generate(venv, name, w, data, scratch, args.quick)
            for cache in args.caches.split(","):
                for comp_flag in args.compute.split(","):
                    compute = w["compute"] if comp_flag == "on" else 0.0
                    cold = cache == "cold"
                    runs = [s for s in systems if not (cold and s == "dlfeed_read")]  # cold: the same run
                    per: Dict[str, List[Dict]] = {s: [] for s in runs}
                    for r in range(args.repeats):
                        for s in bl.rotated(runs, r):
                            res = run_system(s, venv, configs / f"{w['yaml']}.yaml", w, data, scratch, cold,
                                             compute, args.quick)
                            res.update(system=s, workload=name, cache=cache, compute=compute, round=r)
                            raw.append(res)
                            per[s].append(headline(res, cold))
                    key = f"{name}/{cache}/{comp_flag}"
                    cond = [x for x in raw if x["workload"] == name and x["cache"] == cache
                            and x["compute"] == compute]
                    for note in check_same_work(cond):
                        print(f"{key}: MISMATCH {note}", flush=True)
                        mismatches.append(f"{key}: {note}")
                    med = {s: {k: bl.median([x[k] for x in v]) for k in ("samples_s", "au")}
                           for s, v in per.items() if v}
                    results[key] = dict(workload=name, fmt=w["fmt"], cache=cache, compute=compute,
                                        runs=args.repeats, median=med)
                    d, f = med.get("dlio", {}), med.get("dlfeed", {})
                    print(f"{key}: " + ", ".join(f"{s} {v['samples_s']:,.0f} samples/s AU {v['au']:.1f}%"
                                                 for s, v in med.items())
                          + (f"; dlfeed/DLIO {f['samples_s'] / d['samples_s']:.1f}x" if d and f else ""),
                          flush=True)
                    if args.json:
                        bl.dump_json(pathlib.Path(args.json), rep)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rep["machine"]["load_end"] = f"{os.getloadavg()[0]:.1f}"
    if args.json:
        bl.dump_json(pathlib.Path(args.json), rep)
    return rep


if __name__ == "__main__":
    main()
