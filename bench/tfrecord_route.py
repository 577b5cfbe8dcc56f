#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""TFRecord (CRC checked) against HDF5 on the same samples, for one or more
builds side by side: warm, global shuffle, 147 KiB samples (3x224x224 uint8 +
int64 label, 4 x 1,024 samples, written by `dlfeed generate` both ways), from
the CLI (`dlfeed run`) and from Python (`dlfeed.Loader`). Rounds alternate
the builds' order; each prints medians, the TFRecord / HDF5 ratio per build,
and the CLI's CPU time (user + system of the whole run) per sample.

    .venv/bin/python bench/tfrecord_route.py --build base=/tmp/base --build new=build --rounds 5

A build is a folder with tools/dlfeed and python/ (the _dlfeed extension);
the dlfeed package's Python files come from --src (default: this checkout).
"""
import argparse
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

CASES = {  # case: (generate args, CLI fields, Python fields, the folder read)
    "hdf5": (["--format", "hdf5"], "records,labels", ["records", "labels"], ""),
    # image, size and label, moved to DLIO's names (train/img_I_of_N), where
    # the `size` feature shapes `image` as it does DLIO's files.
    "tfrecord": (["--format", "tfrecord"], "image,label", ["image", "label"], "train"),
}
GEN = ["--files", 4, "--samples-per-file", 1024, "--shape", "3,224,224", "--dtype", "uint8"]

PY = r"""
import sys, time, dlfeed
path, fields, epochs, crc = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4] == "1"
loader = dlfeed.Loader(path, fields=fields, batch_size=256, strategy="global_shuffle", seed=1, resident="off",
                       verify_crc=crc)
n, t = 0, 0.0
for e in range(epochs):
    t0 = time.perf_counter()
    for b in loader.iter_epoch(e):
        if e:
            n += len(b.sample_ids)
    if e:
        t += time.perf_counter() - t0
print(n / t)
"""


def cli(build: pathlib.Path, path: pathlib.Path, fields: str, epochs: int, crc: bool = True):
    """(samples/s over epochs 1.., CPU µs per sample of the whole run)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = bl.sh([build / "tools" / "dlfeed", "run", "--quiet", "--strategy", "global_shuffle", "--epochs", epochs,
                 "--fields", fields, "--batch-size", 256, "--resident", "off", *([] if crc else ["--no-verify-crc"]),
                 path])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The per-epoch table: "epoch wall_s steps samples samples/s ..."; epochs 1.. (warm, indexed).
    rows = [(float(m.group(1)), int(m.group(2))) for m in re.finditer(r"^[1-9]\d*\s+([\d.]+)\s+\d+\s+(\d+)\s", out, re.M)]
    total = re.search(r"total: (\d+) samples in ([\d.]+) s", out)
    samples = int(total.group(1))
    rate = sum(n for _, n in rows) / sum(t for t, _ in rows)
    return rate, cpu / samples * 1e6


def python(build: pathlib.Path, src: pathlib.Path, path: pathlib.Path, fields, epochs: int, crc: bool = True) -> float:
    # The extension links libdlfeed.so from its build folder (RUNPATH), which LD_LIBRARY_PATH overrides.
    env = dict(os.environ, PYTHONPATH=f"{src / 'python'}:{build / 'python'}", LD_LIBRARY_PATH=str(build))
    return float(bl.sh([sys.executable, "-c", PY, path, ",".join(fields), epochs, int(crc)], env=env).strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", required=True, help="NAME=BUILD_DIR (repeat)")
    ap.add_argument("--src", default=str(bl.ROOT), help="checkout whose python/ holds the dlfeed package")
    ap.add_argument("--data", default=str(bl.ROOT / "data" / "bench" / "tfrecord_route"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=4, help="CLI epochs per run (the rate is over 1..)")
    ap.add_argument("--py-epochs", type=int, default=3)
    ap.add_argument("--no-python", action="store_true")
    ap.add_argument("--no-crc-too", action="store_true", help="also TFRecord with verify_crc off")
    ap.add_argument("--no-rewarm", action="store_true",
                    help="keep the pages as cached (by the writer, or earlier runs) instead of dropping and reading them")
    args = ap.parse_args()
    builds = [(b.split("=", 1)[0], pathlib.Path(b.split("=", 1)[1]).resolve()) for b in args.build]
    src = pathlib.Path(args.src)
    data = pathlib.Path(args.data)
    paths = {}
    for fmt, (gen, _, _, sub) in CASES.items():
        if bl.generate(data / fmt, [*gen, *GEN], dlfeed=builds[0][1] / "tools" / "dlfeed") and sub:
            (data / fmt / sub).mkdir()
            files = sorted((data / fmt).glob("img_*.tfrecord"))
            for i, f in enumerate(files):
                f.rename(data / fmt / sub / f"img_{i}_of_{len(files)}.tfrecord")
                f.with_name(f.name + ".idx").rename(data / fmt / sub / f"img_{i}_of_{len(files)}.tfrecord.idx")
        paths[fmt] = data / fmt / sub
        # Both datasets' pages cached the same way: dropped, then read in 4 MiB
        # reads. Pages cached by the writer keep the writer's page-cache folio
        # sizes, which can differ between the two formats' writers and cost
        # the kernel's per-folio lookups unequally (docs/performance.md).
        if not args.no_rewarm:
            bl.evict([paths[fmt]])
        bl.warm([paths[fmt]])
    runs = list(CASES) + (["tfrecord-nocrc"] if args.no_crc_too else [])
    got = {}  # (build, case, "cli" | "cpu" | "py") -> [values]
    for r in range(args.rounds):
        for name, build in bl.rotated(builds, r):
            for case in bl.rotated(runs, r):
                fmt, crc = case.split("-")[0], not case.endswith("-nocrc")
                _, cf, pf, _ = CASES[fmt]
                rate, cpu = cli(build, paths[fmt], cf, args.epochs, crc)
                got.setdefault((name, case, "cli"), []).append(rate)
                got.setdefault((name, case, "cpu"), []).append(cpu)
                if not args.no_python:
                    got.setdefault((name, case, "py"), []).append(python(build, src, paths[fmt], pf, args.py_epochs, crc))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{args.rounds} rounds, medians; {time.strftime('%Y-%m-%d %H:%M')}")
    print("| build | from | TFRecord samples/s | HDF5 | TFRecord / HDF5 | CPU us/sample TFRecord / HDF5 |")
    print("|---|---|---|---|---|---|")
    for name, _ in builds:
        t, h = med[(name, "tfrecord", "cli")], med[(name, "hdf5", "cli")]
        tc, hc = med[(name, "tfrecord", "cpu")], med[(name, "hdf5", "cpu")]
        print(f"| {name} | CLI | {t:,.0f} | {h:,.0f} | {t / h:.2f} | {tc:.1f} / {hc:.1f} |")
        if not args.no_python:
            t, h = med[(name, "tfrecord", "py")], med[(name, "hdf5", "py")]
            print(f"| {name} | Python | {t:,.0f} | {h:,.0f} | {t / h:.2f} | |")
        if args.no_crc_too:
            t, tc, h = med[(name, "tfrecord-nocrc", "cli")], med[(name, "tfrecord-nocrc", "cpu")], med[(name, "hdf5", "cli")]
            print(f"| {name} | CLI, CRC off | {t:,.0f} | {h:,.0f} | {t / h:.2f} | {tc:.1f} / |")


if __name__ == "__main__":
    main()
