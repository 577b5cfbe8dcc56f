#!/usr/bin/env python3
"""The first epoch against the later ones, for two builds side by side.

A loader's first epoch allocates its batch buffers (the pool then reuses
them), so whatever allocation costs shows there and nowhere else. This runs
`dlfeed run --workload PRESET --epochs N --compute-ms 0` (warm page cache,
the dataset as the preset makes it) with each build in turn, `--repeats`
rounds, and prints per build the median wall time of each epoch, epoch 1's
over the median of the later ones, and epoch 1's spread.

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


def epochs(binary: pathlib.Path, args) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "s.json"
        subprocess.run([str(binary), "run", "--quiet", "--summary-json", str(out), *map(str, args)], check=True,
                       capture_output=True, cwd=ROOT)
        return [e["wall_s"] for e in json.loads(out.read_text())["epochs"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="build folder of the base commit")
    ap.add_argument("--new", default=str(ROOT / "build"))
    ap.add_argument("--workload", default="resnet50")
    ap.add_argument("--scale", default="0.0025")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    args = ["--workload", a.workload, "--scale", a.scale, "--epochs", a.epochs, "--compute-ms", 0, "--evict=false"]
    builds = {"base": pathlib.Path(a.base) / "tools" / "dlfeed", "new": pathlib.Path(a.new) / "tools" / "dlfeed"}
    for b in builds.values():  # the dataset once, before the timed rounds
        epochs(b, args)
    rows = {name: [] for name in builds}
    for _ in range(a.repeats):
        for name, b in builds.items():
            rows[name].append(epochs(b, args))
    print(f"{a.workload} --scale {a.scale}, {a.epochs} epochs, no compute, warm; medians of {a.repeats} alternating runs")
    for name, rs in rows.items():
        med = [statistics.median(r[i] for r in rs) for i in range(a.epochs)]
        later = statistics.median(med[1:])
        first = sorted(r[0] for r in rs)
        print(f"{name}: epoch wall s {[round(m, 3) for m in med]}; epoch 1 / later {med[0] / later:.2f}; "
              f"epoch 1 min {first[0]:.3f} max {first[-1]:.3f}")


if __name__ == "__main__":
    main()
