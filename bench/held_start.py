#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The start of a held dataset: time to the first batch and the first epoch.

With `resident="auto"` the files are held from create on, in the order the
first epoch first uses them, and a batch waits only for its own files; with
`resident="on"` every file is read before create returns (how "auto" held
before); `resident="off"` reads the files every epoch. Each run is a fresh
Python process: `dlfeed.Loader(...)`, then two epochs; it reports the time
from before create to the first batch, to the first epoch's end (create
included), and the second epoch's time. Warm page cache (the files read once
before the runs), global shuffle; medians of --repeats rounds, the modes in
turn within each round.

    .venv/bin/python bench/held_start.py --repeats 5 --out bench/results/NAME

Sets (written once under --data with numpy and h5py): "large", 12 one-sample
HDF5 files of 64 MiB (h5py, contiguous float32; batch 4, `axis="none"`);
"small", 2,000 NPY files of one 224x224x3 uint8 image (147 KiB; batch 64).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
from typing import Dict, List

from _benchlib import ROOT, git_commit, machine, machine_line

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import dlfeed
path, batch, axis, resident = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
kw = {"axis": axis} if axis != "first" else {}
t0 = time.perf_counter()
L = dlfeed.Loader(path, batch_size=batch, strategy="global_shuffle", seed=1, resident=resident, **kw)
t_create = time.perf_counter() - t0
first, n0, nbytes = None, 0, 0
for b in L:
    if first is None:
        first = time.perf_counter() - t0
    n0 += len(b)
    nbytes += b[0].nbytes
t_epoch0 = time.perf_counter() - t0
t1 = time.perf_counter()
n1 = sum(len(b) for b in L)
t_epoch1 = time.perf_counter() - t1
print(json.dumps({"create_s": t_create, "first_batch_s": first, "epoch0_s": t_epoch0, "epoch1_s": t_epoch1,
                  "samples": [n0, n1], "bytes": nbytes, "reason": L.stats()["resident_reason"]}))
"""


def write_sets(data: pathlib.Path) -> Dict[str, dict]:
    import h5py
    import numpy as np
    sets = {}
    large = data / "large"
    if not (large / "done").exists():
        large.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(12):
            with h5py.File(large / f"sample_{i:03d}.h5", "w") as f:
                f.create_dataset("data", data=rng.random((4096, 4096), dtype=np.float32))
        (large / "done").write_text("")
    sets["large"] = {"path": large, "batch": 4, "axis": "none"}
    small = data / "small"
    if not (small / "done").exists():
        small.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(1)
        for i in range(2000):
            np.save(small / f"img_{i:05d}.npy", rng.integers(0, 256, size=(1, 224, 224, 3), dtype=np.uint8))
        (small / "done").write_text("")
    sets["small"] = {"path": small, "batch": 64, "axis": "first"}
    return sets


def warm(path: pathlib.Path) -> None:
    for p in sorted(path.iterdir()):
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def run(s: dict, resident: str) -> dict:
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", CHILD, str(s["path"]), str(s["batch"]), s["axis"], resident],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/dlfeed-held-start")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sets", default="large,small")
    ap.add_argument("--out", help="folder for results.json and README.md")
    a = ap.parse_args()
    sets = write_sets(pathlib.Path(a.data))
    modes = ["auto", "on", "off"]
    rows: Dict[str, Dict[str, List[dict]]] = {}
    for name in a.sets.split(","):
        s = sets[name]
        warm(s["path"])
        run(s, "auto")  # once, untimed
        rows[name] = {m: [] for m in modes}
        for _ in range(a.repeats):
            for m in modes:
                rows[name][m].append(run(s, m))
    lines = [
        "| set | resident | first batch s (from create) | create s | epoch 0 s (with create) | epoch 1 s | "
        "epoch 0 GB/s | epoch 1 GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for name, by in rows.items():
        for m, rs in by.items():
            med = {k: statistics.median(r[k] for r in rs) for k in ("first_batch_s", "create_s", "epoch0_s",
                                                                    "epoch1_s")}
            gb = rs[0]["bytes"] / 1e9
            summary[f"{name}/{m}"] = dict(med, bytes=rs[0]["bytes"], reason=rs[-1]["reason"])
            lines.append(f"| {name} | {m} | {med['first_batch_s']:.3f} | {med['create_s']:.3f} | "
                         f"{med['epoch0_s']:.3f} | {med['epoch1_s']:.3f} | {gb / med['epoch0_s']:.2f} | "
                         f"{gb / med['epoch1_s']:.2f} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
        cmd = " ".join(["bench/held_start.py", *sys.argv[1:]])
        (out / "README.md").write_text(
            f"# A held dataset's start\n\n{machine_line(machine())}; dlfeed {git_commit()}.\n\n"
            f"    .venv/bin/python {cmd}\n\n"
            f"Medians of {a.repeats} rounds, the modes in turn (bench/held_start.py's docstring says what each "
            f"column is).\n\n{table}\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    main()
