#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The loader against the storage's own limit, side by side in one run.

For each scenario it alternates, `--repeats` times: the device limit for the
access pattern (bench/raw_read: the same sample extents in the same order,
io_uring at queue depth 32, and a single-threaded pread loop) and
`dlfeed run` over the same dataset. Cold runs drop the files' cached pages
first (posix_fadvise DONTNEED, no root). Medians go to docs/performance.md
under "## Loader vs the device", with the command that produced them.

    .venv/bin/python bench/loader_vs_device.py            # writes docs/performance.md
    .venv/bin/python bench/loader_vs_device.py --quick    # smaller, prints only
"""
import argparse
import pathlib
import re
import subprocess
import sys

import _benchlib as bl
from _benchlib import DLFEED, RAW, ROOT, peak_rss_kib, sh

SCENARIOS = [
    # name, generate args, sample bytes, strategy, cold, dlfeed extra args
    dict(name="HDF5, 128 KiB samples, global shuffle, cold cache",
         key="random128k-1g", gen=["--format", "hdf5", "--files", 8, "--samples-per-file", 1024, "--shape", "128,1024"],
         sample=128 * 1024, strategy="global_shuffle", cold=True, target="90% of io_uring QD32"),
    dict(name="HDF5, 4 MiB samples, sequential, cold cache",
         key="seq4m-2g", gen=["--format", "hdf5", "--files", 8, "--samples-per-file", 64, "--shape", "2048,2048"],
         sample=4 << 20, strategy="sequential", cold=True, target="90% of the faster raw reader"),
    dict(name="HDF5, 4 KiB samples, global shuffle, warm cache",
         key="small4k-8x8192", gen=["--format", "hdf5", "--files", 8, "--samples-per-file", 8192, "--shape", "64,64"],
         sample=4096, strategy="global_shuffle", cold=False, target="80% of the pread loop (samples/s)"),
]


def run_dlfeed(path, strategy, budget_mb, cold, extra=()):
    if cold:
        bl.evict([path])
    cmd = [DLFEED, "run", "--fields", "records", "--strategy", strategy, "--batch-size", 32,
           "--memory-budget-mb", budget_mb, "--quiet", *(["--resident", "off"] if cold else []), *extra, path]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    out, err = proc.stdout, proc.stderr
    if proc.returncode:
        raise RuntimeError(f"{cmd} failed: {err}")
    m = re.search(r"total: (\d+) samples in ([\d.]+) s", out)
    if not m:
        raise RuntimeError(f"no total line in: {out}")
    samples, secs = int(m.group(1)), float(m.group(2))
    return samples, secs


def raw(path, mode, strategy, cold):
    r = bl.raw_read(path, mode, strategy, cold, name="records")
    return int(r["samples"]), r["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "data" / "bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one repeat, print only")
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    args = ap.parse_args()
    if not DLFEED.exists() or not RAW.exists():
        sys.exit("build first: cmake --build build --target dlfeed_cli raw_read")
    repeats = 1 if args.quick else args.repeats

    rows = []
    for sc in SCENARIOS:
        path = pathlib.Path(args.data) / sc["key"]
        if not path.exists():
            sh([DLFEED, "generate", "--dir", path, "--dtype", "uint8", *sc["gen"]])
        results = {"uring": [], "pread": [], "dlfeed": [], "one": []}
        if not sc["cold"]:  # warm the cache once
            raw(path, "pread", sc["strategy"], cold=False)
        for r in range(repeats):
            runs = [("uring", lambda: raw(path, "io_uring", sc["strategy"], sc["cold"])),
                    ("pread", lambda: raw(path, "pread", sc["strategy"], sc["cold"])),
                    ("dlfeed", lambda: run_dlfeed(path, sc["strategy"], 1024, sc["cold"])),
                    ("one", lambda: run_dlfeed(path, sc["strategy"], 1024, sc["cold"], ["--io_engines", 1]))]
            if r % 2:
                runs.reverse()  # alternate the order so drift hits all alike
            for key, fn in runs:
                n, secs = fn()
                results[key].append(n * sc["sample"] / secs / 2**20)
        med = {k: bl.median(v) for k, v in results.items()}
        rows.append((sc, med, {k: len(v) for k, v in results.items()}))
        print(f"{sc['name']}: io_uring QD32 {med['uring']:.0f} MiB/s, pread {med['pread']:.0f} MiB/s, "
              f"dlfeed {med['dlfeed']:.0f} MiB/s ({med['dlfeed'] / med['uring']:.0%} of io_uring, "
              f"{med['dlfeed'] / med['pread']:.0%} of pread; one I/O engine {med['one']:.0f} MiB/s)", flush=True)

    # Memory: peak RSS of `dlfeed run` under a 64 MiB budget vs an idle baseline.
    path = pathlib.Path(args.data) / "random128k"
    if not path.exists():
        sh([DLFEED, "generate", "--dir", path, "--dtype", "uint8", "--format", "hdf5", "--files", 8,
            "--samples-per-file", 256, "--shape", "128,1024"])
    base = peak_rss_kib([DLFEED, "run", "--fields", "records", "--prefetch", "off", "--batch-size", 1,
                         "--memory-budget-mb", 1, "--quiet", path])
    budget_mb = 64
    peak = peak_rss_kib([DLFEED, "run", "--fields", "records", "--strategy", "global_shuffle", "--batch-size", 32,
                         "--prefetch", "depth:64", "--memory-budget-mb", budget_mb, "--quiet", path])
    over = (peak - base) / 1024
    print(f"peak RSS {peak / 1024:.0f} MiB with a {budget_mb} MiB budget; baseline (1 sample in flight) "
          f"{base / 1024:.0f} MiB; batches added {over:.0f} MiB = {over / budget_mb:.2f}x the budget")

    if args.quick:
        return
    lines = [
        "## Loader vs the device",
        "",
        f"{bl.machine_line(bl.machine())}, data on the machine's disk, by",
        "",
        "    .venv/bin/python bench/loader_vs_device.py",
        "",
        f"Medians of {repeats} alternating runs per system. *io_uring QD32* and *pread* are bench/raw_read: the",
        "same sample extents in the same order with no planning, decode or batching (the device's own limit",
        "for the pattern); *dlfeed* is `dlfeed run --strategy S --batch-size 32` (default options: io auto,",
        "prefetch auto, coalescing within 64 KiB, reads of at most 4 MiB (buffered ones over 256 KiB in 64 KiB",
        "pieces) with at most 16 MiB",
        "in the kernel, 2 I/O engines on this 2-core machine, the second used only while the first is",
        "CPU-bound on page-cache hits); *one engine* is the same with `--io_engines 1`. Cold runs drop the",
        "files' pages first. The random dataset is 1 GiB (8 files of 1,024 samples), the sequential one 2 GiB (16 batches), so most of an epoch's batch",
        "buffers are recycled, as in a real run, rather than freshly mapped.",
        "",
        "| scenario | io_uring QD32 MiB/s | pread MiB/s | dlfeed MiB/s | dlfeed / io_uring | dlfeed / pread | "
        "one engine MiB/s | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for sc, med, n in rows:
        lines.append(f"| {sc['name']} | {med['uring']:.0f} | {med['pread']:.0f} | {med['dlfeed']:.0f} | "
                     f"{med['dlfeed'] / med['uring']:.0%} | {med['dlfeed'] / med['pread']:.0%} | {med['one']:.0f} | "
                     f"{sc['target']} |")
    lines += [
        "",
        f"Memory: `dlfeed run` with `--memory-budget-mb {budget_mb} --prefetch depth:64` over the 128 KiB dataset "
        f"peaked at {peak / 1024:.0f} MiB RSS; the same run with one sample in flight peaked at "
        f"{base / 1024:.0f} MiB, so batches in flight added {over:.0f} MiB = {over / budget_mb:.2f}x the budget "
        "(target: within 1.2x).",
        "",
    ]
    out = pathlib.Path(args.out)
    bl.replace_section(out, "bench/loader_vs_device", "\n".join(lines), legacy_heading="## Loader vs the device")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
