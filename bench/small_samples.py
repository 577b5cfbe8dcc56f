#!/usr/bin/env python3
"""Small samples, warm page cache, global shuffle: dlfeed reading the files
(--resident off), dlfeed holding them in memory (--resident auto, the
default when the files fit in half the memory budget), and a numpy memmap
fancy-index gather over the same HDF5 datasets in a random order of the same
batch size (the memory-speed reference of issue 17). Alternating, medians.

    .venv/bin/python bench/small_samples.py            # writes docs/performance.md
    .venv/bin/python bench/small_samples.py --quick    # smaller, prints only
"""
import argparse
import re
import subprocess
import time

import h5py
import numpy as np

import _benchlib as bl
from _benchlib import DLFEED, ROOT

# name, sample shape (float32), samples in all (4 files)
SIZES = [
    ("4 B", [1], 2_000_000),
    ("64 B", [16], 1_000_000),
    ("1 KiB", [256], 131_072),
    ("4 KiB", [1024], 65_536),
    ("64 KiB", [16384], 4_096),
]
BATCH = 1024


def dlfeed_rate(path, resident):
    out = subprocess.run([str(DLFEED), "run", "--fields", "records", "--strategy", "global_shuffle", "--batch-size",
                          str(BATCH), "--resident", resident, "--quiet", str(path)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    m = re.search(r"total: (\d+) samples in ([\d.]+) s", out.stdout)
    return int(m.group(1)) / float(m.group(2))


def memmap_rate(path, seed):
    """The files' records datasets as memmaps; one epoch in a random order,
    BATCH samples per fancy-index gather (a copy, as a batch is)."""
    maps = []
    for f in sorted(path.glob("*.hdf5")):
        with h5py.File(f, "r") as h:
            d = h["records"]
            maps.append(np.memmap(f, dtype=d.dtype, mode="r", offset=d.id.get_offset(), shape=d.shape))
    per = maps[0].shape[0]
    n = per * len(maps)
    order = np.random.default_rng(seed).permutation(n)
    t = time.perf_counter()
    for b in range(0, n, BATCH):
        ids = order[b:b + BATCH]
        f, k = ids // per, ids % per
        for j in np.unique(f):
            batch = maps[j][k[f == j]]  # noqa: F841 - the gather is what is timed
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "data" / "bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    m = bl.machine()
    rows = []
    for name, shape, total in SIZES:
        if args.quick:
            total = min(total, 65_536)
        path = bl.pathlib.Path(args.data) / f"small-{'x'.join(map(str, shape))}-{total}"
        bl.generate(path, ["--format", "hdf5", "--files", 4, "--samples-per-file", total // 4, "--shape",
                           ",".join(map(str, shape)), "--dtype", "float32"])
        got = {"off": [], "auto": [], "memmap": []}
        for r in range(repeats):
            for system in bl.rotated(list(got), r):
                if system == "memmap":
                    got[system].append(memmap_rate(path, r))
                else:
                    got[system].append(dlfeed_rate(path, system))
        med = {k: bl.median(v) for k, v in got.items()}
        rows.append((name, total, med))
        print(f"{name}: read {med['off']:,.0f}, held {med['auto']:,.0f}, numpy memmap {med['memmap']:,.0f} "
              f"samples/s ({med['auto'] / med['memmap']:.2f} of memmap)", flush=True)
    m["load_end"] = f"{bl.os.getloadavg()[0]:.1f}"
    lines = [
        "## Small samples: read, held in memory, numpy memmap",
        "",
        f"{bl.machine_line(m)}, commit {bl.git_commit()}, by",
        "",
        f"    .venv/bin/python bench/small_samples.py{' --quick' if args.quick else ''}",
        "",
        f"Medians of {repeats} alternating runs per system; HDF5, 4 files, float32 samples, warm page cache, "
        f"global shuffle, batches of {BATCH}. *read*: `dlfeed run --resident off` (a read request per sample "
        "or coalesced run); *held*: `--resident auto` (the files, within half the memory budget, read once at "
        "create; every read a copy from memory); *numpy memmap*: a fancy-index gather per batch from np.memmap "
        "views of the same datasets (no decode, no batch assembly beyond the copy).",
        "",
        "| sample | samples | read samples/s | held samples/s | numpy memmap samples/s | held / read | held / memmap |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, total, med in rows:
        lines.append(f"| {name} | {total:,} | {med['off']:,.0f} | {med['auto']:,.0f} | {med['memmap']:,.0f} | "
                     f"{med['auto'] / med['off']:.1f}x | {med['auto'] / med['memmap']:.2f} |")
    body = "\n".join(lines)
    if args.quick:
        print(body)
    else:
        bl.replace_section(bl.pathlib.Path(args.out), "bench/small_samples", body)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
