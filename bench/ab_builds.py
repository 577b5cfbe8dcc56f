#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two builds of `dlfeed run` side by side: the same datasets, alternating
runs, medians. For "before and after within noise" checks of a change:

    git worktree add /tmp/base BASE_COMMIT && cmake -S /tmp/base -B /tmp/base/build -G Ninja \\
        -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build /tmp/base/build --target dlfeed_cli
    .venv/bin/python bench/ab_builds.py --base /tmp/base/build --new build --repeats 7

Prints one line per scenario: samples/s of each build (medians) and new/base.
"""
import argparse
import pathlib
import re
import subprocess

import _benchlib as bl
from _benchlib import ROOT, sh

SCENARIOS = [
    # name, generate args, run args
    ("HDF5 4 KiB samples, global shuffle, warm", "small4k-8x8192",
     ["--format", "hdf5", "--files", 8, "--samples-per-file", 8192, "--shape", "64,64"],
     ["--fields", "records", "--strategy", "global_shuffle", "--batch-size", 32]),
    ("HDF5 128 KiB samples, global shuffle, warm", "random128k-8x256",
     ["--format", "hdf5", "--files", 8, "--samples-per-file", 256, "--shape", "128,1024"],
     ["--fields", "records", "--strategy", "global_shuffle", "--batch-size", 32]),
    ("HDF5 128 KiB samples, global shuffle, cold", "random128k-8x256",
     ["--format", "hdf5", "--files", 8, "--samples-per-file", 256, "--shape", "128,1024"],
     ["--fields", "records", "--strategy", "global_shuffle", "--batch-size", 32, "--evict"]),
    ("HDF5 1 KiB samples, global shuffle, warm, not held", "small1k-4x16384",
     ["--format", "hdf5", "--files", 4, "--samples-per-file", 16384, "--shape", 1024],
     ["--fields", "records", "--strategy", "global_shuffle", "--batch-size", 1024, "--resident", "off"]),
    ("HDF5 1 KiB samples, global shuffle, cold", "small1k-4x16384",
     ["--format", "hdf5", "--files", 4, "--samples-per-file", 16384, "--shape", 1024],
     ["--fields", "records", "--strategy", "global_shuffle", "--batch-size", 1024, "--evict"]),
    ("NPZ (DLIO layout) 16 KiB samples, sequential, warm", "npz-dlio-16x64",
     ["--format", "npz", "--layout", "dlio", "--files", 16, "--samples-per-file", 64, "--shape", "128,128"],
     ["--strategy", "sequential", "--batch-size", 16]),
]


def run(binary: pathlib.Path, path: pathlib.Path, args) -> float:
    proc = subprocess.run([str(binary), "run", "--quiet", *map(str, args), str(path)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{binary} run failed: {proc.stderr}")
    m = re.search(r"total: (\d+) samples in ([\d.]+) s", proc.stdout)
    if not m:
        raise RuntimeError(f"no total line in: {proc.stdout}")
    return int(m.group(1)) / float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="build folder of the base (holds tools/dlfeed)")
    ap.add_argument("--new", default=str(ROOT / "build"), help="build folder of the change")
    ap.add_argument("--data", default=str(ROOT / "data" / "bench"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run (short runs are noisy)")
    ap.add_argument("--only", default="", help="run only scenarios whose name contains this")
    args = ap.parse_args()
    base = pathlib.Path(args.base) / "tools" / "dlfeed"
    new = pathlib.Path(args.new) / "tools" / "dlfeed"
    for name, key, gen, run_args in SCENARIOS:
        if args.only not in name:
            continue
        run_args = [*run_args, "--epochs", args.epochs]
        path = pathlib.Path(args.data) / key
        if not path.exists():
            sh([base, "generate", "--dir", path, "--dtype", "uint8", *gen])
        if (path / "train").exists():
            path = path / "train"
        run(new, path, [a for a in run_args if a != "--evict"])  # warm the cache (and the binaries) once
        got = {"base": [], "new": []}
        for r in range(args.repeats):
            order = [("base", base), ("new", new)]
            if r % 2:
                order.reverse()  # alternate, so drift hits both alike
            for key_, binary in order:
                got[key_].append(run(binary, path, run_args))
        b, n = bl.median(got["base"]), bl.median(got["new"])
        print(f"{name}: base {b:,.0f} samples/s, new {n:,.0f} samples/s, new/base {n / b:.2f} "
              f"(ranges {min(got['base']):,.0f}-{max(got['base']):,.0f} and {min(got['new']):,.0f}-"
              f"{max(got['new']):,.0f}; {args.repeats} runs each)", flush=True)


if __name__ == "__main__":
    main()
