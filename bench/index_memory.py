#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a Loader costs in memory and time to create over many samples
(issue 16's index-memory goals), measured in a fresh Python process each:

  * one contiguous HDF5 file of 4 M samples of 4 bytes (h5py writes it):
    RSS added by `dlfeed.Loader(...)` (target: under 64 MiB), then by the
    first batch, and the process's peak over one epoch;
  * with --billion, 100 HDF5 files of 10^7 one-byte samples each (10^9
    samples, 954 MB; h5py writes them once, kept under --data): create time
    (target: under 1 s), RSS after create (target: under 200 MB), and a
    `global_feistel` epoch streaming from it (the first --batches batches).

RSS is /proc/self/status VmRSS after `import dlfeed, numpy` (the baseline),
after create, after the first batch; the peak is VmHWM. resident="off" (the
file is not held in memory: the index, the order and the batch buffers are
what is measured; resident="auto" would add the 16 MB file, counted in the
memory budget).

    .venv/bin/python bench/index_memory.py              # prints the table
    .venv/bin/python bench/index_memory.py --billion    # also the 10^9 point (writes ~1 GB once)
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import _benchlib as bl
from _benchlib import PYTHONPATH, ROOT

CHILD = r"""
import json, sys, time
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
import numpy as np, dlfeed
path, strategy, batch, batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
base = rss("VmRSS")
t0 = time.perf_counter()
loader = dlfeed.Loader(path, fields=["x"], batch_size=batch, strategy=strategy, seed=1, resident="off",
                       drop_last_batch=True)
create_s = time.perf_counter() - t0
after_create = rss("VmRSS")
it = iter(loader)
t1 = time.perf_counter()
first = next(it)
first_s = time.perf_counter() - t1
after_first = rss("VmRSS")
n = 1
t2 = time.perf_counter()
for b in it:
    n += 1
    if batches and n >= batches:
        break
rest_s = time.perf_counter() - t2
print(json.dumps({"samples": len(loader) * batch if hasattr(loader, "__len__") else None,
                  "create_s": create_s, "first_batch_s": first_s, "batches": n, "rest_s": rest_s,
                  "base": base, "after_create": after_create, "after_first": after_first,
                  "peak": rss("VmHWM")}))
"""


def write_4m(path: pathlib.Path) -> None:
    import h5py
    import numpy as np
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path.with_suffix(".tmp"), "w") as f:
        f.create_dataset("x", data=np.arange(4_000_000, dtype=np.uint32).reshape(-1, 1))
    path.with_suffix(".tmp").rename(path)


def write_billion(folder: pathlib.Path) -> None:
    import h5py
    import numpy as np
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(100):
        p = folder / f"part_{i:03d}.h5"
        if p.exists():
            continue
        with h5py.File(p.with_suffix(".tmp"), "w") as f:
            f.create_dataset("x", data=np.full((10_000_000, 1), i, dtype=np.uint8))
        p.with_suffix(".tmp").rename(p)


def measure(path: pathlib.Path, strategy: str, batch: int, batches: int) -> dict:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), strategy, str(batch), str(batches)],
                         capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/index-memory")
    ap.add_argument("--billion", action="store_true")
    ap.add_argument("--batches", type=int, default=50, help="batches of the 10^9 epoch to stream")
    a = ap.parse_args()
    data = pathlib.Path(a.data)
    m = bl.machine()
    print(f"{bl.machine_line(m)}, commit {bl.git_commit()}")
    rows = []
    four = data / "4m" / "x.h5"
    write_4m(four)
    for strategy in ("sequential", "global_shuffle", "global_feistel"):
        r = measure(four, strategy, 1024, 0)
        rows.append(("1 HDF5 file, 4 M samples of 4 B", strategy, r))
    if a.billion:
        folder = data / "1g"
        write_billion(folder)
        r = measure(folder, "global_feistel", 4096, a.batches)
        rows.append(("100 HDF5 files, 10^9 samples of 1 B", f"global_feistel ({a.batches} batches)", r))
    mib = 1 << 20
    print("| dataset | strategy | create s | RSS added by create MiB | + first batch MiB | peak RSS MiB "
          "| first batch s | batches/s after |")
    print("|---|---|---|---|---|---|---|---|")
    for name, strategy, r in rows:
        rate = (r["batches"] - 1) / r["rest_s"] if r["rest_s"] > 0 else float("nan")
        print(f"| {name} | {strategy} | {r['create_s']:.3f} | {(r['after_create'] - r['base']) / mib:.1f} "
              f"| {(r['after_first'] - r['base']) / mib:.1f} | {r['peak'] / mib:.0f} | {r['first_batch_s']:.3f} "
              f"| {rate:.0f} |")


if __name__ == "__main__":
    main()
