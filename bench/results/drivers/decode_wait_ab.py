#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two builds of `dlfeed run` side by side on the scenarios the decode
stage's hand-off touches (issue 27: no oneTBB worker waits on a read):
bench/loader_vs_device.py's three dlfeed runs, bench/small_samples.py's
read (`--resident off`) and held (`--resident auto`) runs at three sizes,
and deflated HDF5 (CPU-heavy decode) on 2 and 4 threads, cold and warm,
where a worker held by a batch's reads costs decode time. Alternating runs,
rotated each round; medians and new/base.

    .venv/bin/python bench/results/drivers/decode_wait_ab.py --base /tmp/base/tools/dlfeed \
        --new build/tools/dlfeed --repeats 5

Each cell is samples/s: the `total:` line (all epochs), or for the small
samples the epochs after the first (`epoch N:` lines), as small_samples.py
counts them; the columns are base median (range), new median (range), the
ratio of the medians and the median of each round's new/base. Datasets are
made once under --data by the base binary.
"""
import argparse
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # bench/, for _benchlib
import _benchlib as bl  # noqa: E402
from _benchlib import ROOT  # noqa: E402

F32 = ["--format", "hdf5", "--dtype", "float32", "--files", 4]
GZ = ["--format", "hdf5", "--dtype", "float32", "--files", 8, "--samples-per-file", 128, "--shape", "256,256",
      "--compression", "deflate", "--chunk-samples", 1, "--hdf5-shuffle"]
READ = ["--fields", "records", "--strategy", "global_shuffle"]
SCENARIOS = [
    # name, dataset key, generate args, run args, metric ("total" or "later")
    ("lvd: HDF5 128 KiB, global shuffle, cold", "random128k-1g",
     ["--format", "hdf5", "--files", 8, "--samples-per-file", 1024, "--shape", "128,1024"],
     [*READ, "--batch-size", 32, "--memory-budget-mb", 1024, "--resident", "off", "--evict"], "total"),
    ("lvd: HDF5 4 MiB, sequential, cold", "seq4m-2g",
     ["--format", "hdf5", "--files", 8, "--samples-per-file", 64, "--shape", "2048,2048"],
     ["--fields", "records", "--strategy", "sequential", "--batch-size", 32, "--memory-budget-mb", 1024,
      "--resident", "off", "--evict"], "total"),
    ("lvd: HDF5 4 KiB, global shuffle, warm (held)", "small4k-8x8192",
     ["--format", "hdf5", "--files", 8, "--samples-per-file", 8192, "--shape", "64,64"],
     [*READ, "--batch-size", 32, "--memory-budget-mb", 1024], "total"),
    ("small: 4 KiB f32, read", "ab-f32-4k", [*F32, "--samples-per-file", 16384, "--shape", 1024],
     [*READ, "--batch-size", 1024, "--epochs", 8, "--resident", "off"], "later"),
    ("small: 4 KiB f32, held", "ab-f32-4k", [*F32, "--samples-per-file", 16384, "--shape", 1024],
     [*READ, "--batch-size", 1024, "--epochs", 8, "--resident", "auto"], "later"),
    ("small: 64 KiB f32, read", "ab-f32-64k", [*F32, "--samples-per-file", 1024, "--shape", 16384],
     [*READ, "--batch-size", 256, "--epochs", 12, "--resident", "off"], "later"),
    ("small: 1 MiB f32, read", "ab-f32-1m", [*F32, "--samples-per-file", 112, "--shape", 262144],
     [*READ, "--batch-size", 16, "--epochs", 24, "--resident", "off"], "later"),
    ("deflate HDF5 256 KiB, 2 threads, cold", "ab-gzip", GZ,
     [*READ, "--batch-size", 16, "--threads", 2, "--resident", "off", "--evict", "--epochs", 2], "total"),
    ("deflate HDF5 256 KiB, 2 threads, warm", "ab-gzip", GZ,
     [*READ, "--batch-size", 16, "--threads", 2, "--resident", "off", "--epochs", 2], "total"),
    ("deflate HDF5 256 KiB, 2 threads, cold, prefetch depth:2", "ab-gzip", GZ,
     [*READ, "--batch-size", 16, "--threads", 2, "--resident", "off", "--evict", "--epochs", 2, "--prefetch",
      "depth:2"], "total"),
    ("deflate HDF5 256 KiB, 4 threads, cold", "ab-gzip", GZ,
     [*READ, "--batch-size", 16, "--threads", 4, "--resident", "off", "--evict", "--epochs", 2], "total"),
]


def rate(binary, path, args, metric):
    cmd = [str(binary), "run", *map(str, args), str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{cmd} failed: {proc.stderr[-2000:]}")
    if metric == "later":
        got = re.findall(r"^epoch (\d+): \d+ batches, (\d+) samples in ([\d.]+) s", proc.stdout, re.M)
        later = [(int(n), float(t)) for e, n, t in got if int(e) > 0]
        if not later:
            raise RuntimeError(f"no later epochs in: {proc.stdout[-2000:]}")
        return sum(n for n, _ in later) / sum(t for _, t in later)
    m = re.search(r"total: (\d+) samples in ([\d.]+) s", proc.stdout)
    if not m:
        raise RuntimeError(f"no total line in: {proc.stdout[-2000:]}")
    return int(m.group(1)) / float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the base build's tools/dlfeed")
    ap.add_argument("--new", default=str(ROOT / "build" / "tools" / "dlfeed"))
    ap.add_argument("--data", default=str(ROOT / "data" / "bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="", help="only scenarios whose name contains this")
    args = ap.parse_args()
    bins = {"base": pathlib.Path(args.base), "new": pathlib.Path(args.new)}
    print(bl.machine_line(bl.machine()), flush=True)
    for name, key, gen, run_args, metric in SCENARIOS:
        if args.only not in name:
            continue
        path = pathlib.Path(args.data) / key
        if not path.exists():
            bl.sh([bins["base"], "generate", "--dir", path, *gen])
        quiet = [a for a in run_args if a != "--evict"]
        rate(bins["new"], path, quiet, metric)  # warm the binaries (and, for warm runs, the cache) once
        got = {"base": [], "new": []}
        for r in range(args.repeats):
            for which in bl.rotated(["base", "new"], r):
                got[which].append(rate(bins[which], path, run_args, metric))
        b, n = bl.median(got["base"]), bl.median(got["new"])
        spread = {k: f"{min(v):.0f}-{max(v):.0f}" for k, v in got.items()}
        # Each round ran both back to back: the median of the rounds' ratios
        # is less moved by load that comes and goes than the ratio of medians.
        paired = bl.median([x / y for x, y in zip(got["new"], got["base"])])
        print(f"| {name} | {b:.0f} ({spread['base']}) | {n:.0f} ({spread['new']}) | {n / b:.2f} | {paired:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
