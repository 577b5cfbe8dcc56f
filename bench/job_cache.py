#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The job cache (`dlfeed run --cache`, docs/distributed.md) against today's
global shuffle, local_shuffle, node-local staging and a NoPFS-style policy,
under `mpirun -np 4` on one machine, every rank its own node
(--cache-ranks-per-node 1), the files read through the same --source-throttle
standing in for a parallel file system the job shares (default 200M:1ms: 200
MiB/s for the four ranks together, 1 ms per read).

The dataset is written by h5py as HEP CNN's files are: --files HDF5 files of 16
samples, X (16, 64, 64, 8) float32 (128 KiB a sample) and y (16,) int64.

Runs (each --epochs epochs, --batch-size per rank, no compute, the barrier per
step), in rounds whose order rotates; medians over --rounds:

- global_shuffle: the files every epoch;
- local_shuffle: each rank its own files (not a global order: the yardstick
  the issue sets, >= 0.9 of its rate);
- staging: global_shuffle with --stage-to /dev/shm/.../rankR, a folder per
  rank as each node has its own disk (each rank copies the files it owns in
  epoch 0; other ranks' files still come from the source);
- cache P%: global_shuffle with --cache sized so the job's cache is P% of the
  dataset (P in --sizes);
- cache 100%, one node: the same cache with the four ranks one node (the
  default: MPI finds them sharing memory), which read each other's shares with
  plain loads from one shared-memory window instead of MPI_Get (run when 100
  is in --sizes);
- NoPFS-style: not run, modeled from the same orders (`dlfeed order`): each
  node caches the samples it will read most often over the run (ties: the
  earlier first read), the job's cache split evenly; a sample in any node's
  cache is read from there, others from the files; a cached sample its node
  does not read in epoch 0 is fetched for the cache then (NoPFS prefetches).
  The model counts source bytes only.

Reports, for epochs >= 1: the job's epoch time (the slowest rank's), the stall
per step (median and p99 over the ranks' steps, the summary's stall_ns), bytes
from the files per epoch as a share of the dataset, and the job checksum
(equal for every run, or the script says so).

    .venv/bin/python bench/job_cache.py                        # about 2 minutes on 2 cores
    .venv/bin/python bench/job_cache.py --rounds 5 --throttle 1G:200us --files 32
    .venv/bin/python bench/job_cache.py --cold          # no throttle: the disk, cold, every epoch
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _benchlib import DLFEED, machine, machine_line, median, rotated  # noqa: E402

NP = 4
SAMPLES_PER_FILE = 16
SAMPLE = (64, 64, 8)


def write_dataset(d: pathlib.Path, files: int) -> int:
    import h5py
    rng = np.random.default_rng(3)
    for f in range(files):
        with h5py.File(d / f"train_{f:04d}.h5", "w") as h:
            h["X"] = rng.standard_normal((SAMPLES_PER_FILE, *SAMPLE), dtype=np.float32)
            h["y"] = rng.integers(0, 2, SAMPLES_PER_FILE, dtype=np.int64)
    return files * SAMPLES_PER_FILE * (int(np.prod(SAMPLE)) * 4 + 8)


def mpirun() -> list:
    cmd = ["mpirun", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return [*cmd, "-np", str(NP)]


def run_job(a, data: pathlib.Path, out: pathlib.Path, extra: list, strategy: str, stage: str = "") -> dict:
    # Staging: a folder per rank, as each node has its own disk (on one machine
    # the ranks would otherwise find each other's copies in one folder).
    launch = [str(DLFEED), "run"] if not stage else [
        "sh", "-c", f'd={stage}/rank$OMPI_COMM_WORLD_RANK; mkdir -p "$d"; exec "$0" run --stage-to "$d" "$@"',
        str(DLFEED)]
    cmd = [*mpirun(), *launch, "--mpi=on", "--fields", "X,y", "--strategy", strategy,
           "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--checksum", "--quiet",
           *(["--evict"] if a.cold else ["--source-throttle", a.throttle]), "--summary-json", str(out), *extra,
           str(data)]
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    m = re.search(r"checksum: ([0-9a-f]{16})", proc.stdout)
    return {"summary": json.loads(out.read_text()), "checksum": m.group(1) if m else None, "cmd": cmd}


def source_bytes(summary: dict) -> list:
    jc = summary.get("job_cache")
    if jc:
        return [e["bytes_read_source"] for e in jc["epochs"]]
    return [e["bytes_read"] - e["bytes_read_staged"] for e in summary["epochs"]]


def rank_orders(epochs: int, files: int, seed: int) -> list:
    """orders[e][r]: rank r's sample ids in epoch e (global_shuffle), as `dlfeed order` prints them."""
    out = []
    for e in range(epochs):
        per_rank = []
        for r in range(NP):
            text = subprocess.run([str(DLFEED), "order", "--files", str(files), "--samples-per-file",
                                   str(SAMPLES_PER_FILE), "--strategy", "global_shuffle", "--seed", str(seed),
                                   "--epoch", str(e), "--rank", str(r), "--world-size", str(NP)],
                                  capture_output=True, text=True, check=True).stdout
            per_rank.append([int(x) for x in text.split()])
        out.append(per_rank)
    return out


def nopfs_model(orders: list, samples: int, share: float) -> list:
    """Per epoch, the samples a NoPFS-style job reads from the files (see the module's doc)."""
    per_node = int(samples * share / NP)
    caches = []
    for r in range(NP):
        count = collections.Counter()
        first = {}
        for e, per_rank in enumerate(orders):
            for k, s in enumerate(per_rank[r]):
                count[s] += 1
                first.setdefault(s, (e, k))
        ranked = sorted(count, key=lambda s: (-count[s], first[s]))
        caches.append(set(ranked[:per_node]))
    cached = set().union(*caches)
    reads = []
    for e, per_rank in enumerate(orders):
        read = set().union(*map(set, per_rank))
        if e == 0:
            fills = sum(len(caches[r] - set(per_rank[r])) for r in range(NP))
            reads.append(len(read) + fills)
        else:
            reads.append(len(read - cached))
    return reads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=64)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--throttle", default="200M:1ms")
    p.add_argument("--cold", action="store_true",
                   help="no throttle: the files' pages dropped before each epoch (--evict), read cold from the disk")
    p.add_argument("--sizes", default="25,50,100,200", help="job cache sizes, %% of the dataset")
    p.add_argument("--seed", type=int, default=42, help="dlfeed run's default seed")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out/job_cache"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="dlfeed-jc-"))
    stage = pathlib.Path(tempfile.mkdtemp(prefix="dlfeed-jc-stage-", dir="/dev/shm"))
    try:
        data = work / "train"
        data.mkdir()
        dataset = write_dataset(data, a.files)
        samples = a.files * SAMPLES_PER_FILE
        sizes = [int(x) for x in a.sizes.split(",")]
        # Slots take 8 bytes more per extent (two per sample), rounded up to 8.
        slot_overhead = samples * 2 * 8
        runs = {"global_shuffle": ("global_shuffle", []), "local_shuffle": ("local_shuffle", []),
                "staging": ("global_shuffle", ["--stage-wait"])}
        for pct in sizes:
            job_bytes = dataset * pct // 100 + slot_overhead * min(pct, 100) // 100
            runs[f"cache {pct}%"] = ("global_shuffle", ["--cache", str(job_bytes // NP),
                                                        "--cache-ranks-per-node", "1"])
            if pct == 100:  # one node of 4 ranks (the cache per node 4 times a rank's share)
                runs["cache 100%, one node"] = ("global_shuffle", ["--cache", str(job_bytes)])
        results = collections.defaultdict(list)
        for rnd in range(a.rounds):
            for name in rotated(list(runs), rnd):
                shutil.rmtree(stage, ignore_errors=True)
                stage.mkdir()
                strategy, extra = runs[name]
                out = work / f"{name.replace(' ', '_').replace('%', 'pct')}.{rnd}.json"
                results[name].append(run_job(a, data, out, extra, strategy, str(stage) if name == "staging" else ""))
                print(f"round {rnd} {name}: done", file=sys.stderr)
        orders = rank_orders(a.epochs, a.files, a.seed)
        sample_bytes = dataset / samples
        rows = []
        base = None
        local = None
        for name, rs in results.items():
            later = [e for r in rs for e in r["summary"]["epochs"][1:]]
            t = median([e["wall_s"] for e in later])
            stall50 = median([e["latency"]["stall_ns"]["p50"] / 1e6 for e in later])
            stall99 = median([e["latency"]["stall_ns"]["p99"] / 1e6 for e in later])
            src = median([b for r in rs for b in source_bytes(r["summary"])[1:]])
            src0 = median([source_bytes(r["summary"])[0] for r in rs])
            sums = {r["checksum"] for r in rs}
            rows.append([name, t, stall50, stall99, src0 / dataset, src / dataset, ",".join(sorted(sums))])
            if name == "global_shuffle":
                base = t
            if name == "local_shuffle":
                local = t
        model = {pct: nopfs_model(orders, samples, pct / 100) for pct in sizes}
        all_sums = {r[6] for r in rows if r[0] != "local_shuffle"}
        lines = [
            f"machine: {machine_line(machine())}",
            f"dataset: {a.files} HDF5 files x {SAMPLES_PER_FILE} samples, {dataset / 2**20:.1f} MiB; "
            f"{NP} ranks, each its own node (but 'one node'); {'--evict (cold)' if a.cold else '--source-throttle ' + a.throttle}; "
            f"{a.epochs} epochs, batch "
            f"{a.batch_size}, {a.rounds} rounds",
            f"command: .venv/bin/python bench/job_cache.py {' '.join(sys.argv[1:])}".rstrip(),
            "",
            "| run | epoch >= 1 time (s) | x global_shuffle | / local_shuffle | stall p50 (ms) | stall p99 (ms) "
            "| files, epoch 0 | files, epochs >= 1 | NoPFS-style model: files, epoch 0 / >= 1 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, t, s50, s99, f0, f1, _ in rows:
            pct = int(name.split()[1].rstrip("%,")) if name.startswith("cache") else None
            nop = (f"{model[pct][0] * sample_bytes / dataset:.2f} / "
                   f"{median(model[pct][1:]) * sample_bytes / dataset:.2f}" if pct else "")
            lines.append(f"| {name} | {t:.3f} | {base / t:.2f} | {local / t:.2f} | {s50:.2f} | {s99:.2f} "
                         f"| {f0:.2f} | {f1:.2f} | {nop} |")
        lines.append("")
        lines.append("job checksum: " + ("equal in every global_shuffle run" if len(all_sums) == 1
                                         else f"DIFFERS: {sorted(all_sums)}"))
        text = "\n".join(lines) + "\n"
        (a.out / "README.md").write_text(text)
        runs_kept = {name: [{"checksum": r["checksum"], "cmd": r["cmd"],
                             "epochs": [{"wall_s": e["wall_s"], "stall_p50_ms": e["latency"]["stall_ns"]["p50"] / 1e6,
                                         "stall_p99_ms": e["latency"]["stall_ns"]["p99"] / 1e6}
                                        for e in r["summary"]["epochs"]],
                             "source_bytes": source_bytes(r["summary"]), "job_cache": r["summary"].get("job_cache")}
                            for r in rs] for name, rs in results.items()}
        (a.out / "job_cache.json").write_text(json.dumps(
            {"rows": rows, "nopfs_model_samples": model, "dataset_bytes": dataset, "runs": runs_kept}, indent=1))
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    main()
