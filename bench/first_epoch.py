#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The first epoch against the later ones, for two builds side by side.

A loader's first epoch allocates its batch buffers (the pool then reuses
them), so whatever allocation costs shows there and nowhere else. This runs
`dlfeed run --workload PRESET --epochs N --compute-ms 0` (warm page cache,
the dataset as the preset makes it) with each build in turn, `--repeats`
rounds, and prints per build the median wall time of each epoch, epoch 1's
over the median of the later ones, epoch 1's spread, and from each run's
Chrome trace the first batch's decode time against the later batches'.

    git worktree add /tmp/base BASE_COMMIT && cmake -S /tmp/base -B /tmp/base/build -G Ninja \\
        -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build /tmp/base/build --target dlfeed_cli
    .venv/bin/python bench/first_epoch.py --base /tmp/base/build --new build --repeats 9
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import tempfile

from _benchlib import ROOT


def epochs(binary: pathlib.Path, args):
    """Each epoch's wall time, and the decode times of the batches in order (ms)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, trace = pathlib.Path(tmp) / "s.json", pathlib.Path(tmp) / "t.json"
        subprocess.run([str(binary), "run", "--quiet", "--summary-json", str(out), "--trace", str(trace),
                        "--trace-format", "chrome", *map(str, args)], check=True, capture_output=True, cwd=ROOT)
        events = json.loads(trace.read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        decodes = sorted((e for e in events if e.get("ph") == "X" and e["name"] == "decode"), key=lambda e: e["ts"])
        return [e["wall_s"] for e in json.loads(out.read_text())["epochs"]], [e["dur"] / 1e3 for e in decodes]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="build folder of the base commit")
    ap.add_argument("--new", default=str(ROOT / "build"))
    ap.add_argument("--workload", default="resnet50")
    ap.add_argument("--scale", default="0.0025")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--no-verify-crc", action="store_true", help="TFRecord: skip the CRC checks")
    a = ap.parse_args()
    args = ["--workload", a.workload, "--scale", a.scale, "--epochs", a.epochs, "--compute-ms", 0, "--evict=false"]
    if a.no_verify_crc:
        args.append("--no-verify-crc")
    builds = {"base": pathlib.Path(a.base) / "tools" / "dlfeed", "new": pathlib.Path(a.new) / "tools" / "dlfeed"}
    for b in builds.values():  # the dataset once, before the timed rounds
        epochs(b, args)
    rows = {name: [] for name in builds}
    for _ in range(a.repeats):
        for name, b in builds.items():
            rows[name].append(epochs(b, args))
    print(f"{a.workload} --scale {a.scale}, {a.epochs} epochs, no compute, warm; medians of {a.repeats} alternating runs")
    for name, rs in rows.items():
        walls = [w for w, _ in rs]
        med = [statistics.median(w[i] for w in walls) for i in range(a.epochs)]
        later = statistics.median(med[1:])
        first = sorted(w[0] for w in walls)
        first_decode = statistics.median(d[0] for _, d in rs)
        later_decode = statistics.median(statistics.median(d[1:]) for _, d in rs)
        print(f"{name}: epoch wall s {[round(m, 3) for m in med]}; epoch 1 / later {med[0] / later:.2f}; "
              f"epoch 1 min {first[0]:.3f} max {first[-1]:.3f}; decode ms: first batch {first_decode:.1f}, "
              f"later batches {later_decode:.1f}")


if __name__ == "__main__":
    main()
