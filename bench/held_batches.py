#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The loader's rate with k batches held by the consumer (issue 28).

A consumer that keeps a few batches alive (a copy queue to a GPU, gradient
accumulation, its own prefetch) must not slow the loader: the prefetch policy's
byte limit counts only the look-ahead, the memory budget counts both. This runs
one dlfeed.Loader per (k, round), its epochs after the first timed, over ImageNet-like HDF5 files (3x224x224
uint8 + an int64 label, warm page cache, global shuffle, batch 256), holding the
last k batches, in alternating rounds, and prints the median samples/s per k and
its ratio to k = 0.

    python bench/held_batches.py [--data DIR] [--rounds 3] [--ks 0,1,2,4,8] [--files 16 --per-file 512] [--epochs 3]
                                 [--json OUT.json] [--io-engines N]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from typing import Dict, List


try:  # an installed dlfeed (the GPU machine: a wheel), else this checkout's build
    import dlfeed  # noqa: F401
except ImportError:
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.join(_root, "python"),
                    os.path.join(os.environ.get("DLFEED_BUILD_DIR", os.path.join(_root, "build")), "python")]

# The same ImageNet-like HDF5 files (image uint8 (per, 3, 224, 224), label int64) and page-cache warming
# as bench/gpu_feed.py, which measures the same case on a GPU machine.
from gpu_feed import make_data as make_images, warm  # noqa: E402


def rate_holding(folder: str, k: int, epochs: int = 3, io_engines: int = 0) -> Dict[str, float]:
    """A CPU-only dlfeed.Loader keeping the last k batches alive: epoch 0 fills the
    pool (fresh buffers fault their pages in), epochs 1.. are timed (buffers reused)."""
    import dlfeed

    kw = {"io_engines": io_engines} if io_engines else {}
    with dlfeed.Loader(folder, fields=["image", "label"], batch_size=256, strategy="global_shuffle", seed=3,
                       **kw) as loader:
        held: collections.deque = collections.deque()
        n = 0
        ahead = []
        t0 = 0.0
        alloc0 = 0
        for e in range(epochs):
            if e == 1:
                t0, n, alloc0 = time.perf_counter(), 0, loader.stats()["pool_allocations"]
            for b in loader.iter_epoch(e):
                n += len(b)
                held.append(b)
                while len(held) > k:
                    held.popleft()
                ahead.append(loader.stats()["lookahead_batches"])
        s = time.perf_counter() - t0
        held.clear()
        st = loader.stats()
    return {"samples_s": n / s, "samples": n, "seconds": s, "lookahead_median": statistics.median(ahead),
            "timed_pool_allocations": st["pool_allocations"] - alloc0,
            "peak_in_flight_mb": st["peak_in_flight_bytes"] / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/dlfeed_held/img")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3, help="per run; the first fills the pool and is not timed")
    ap.add_argument("--per-file", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ks", default="0,1,2,4,8")
    ap.add_argument("--io-engines", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    ks = [int(x) for x in a.ks.split(",")]
    paths = make_images(a.data, a.files, a.per_file)
    warm(paths)
    rates: Dict[int, List[float]] = {k: [] for k in ks}
    detail: Dict[int, List[Dict[str, float]]] = {k: [] for k in ks}
    for r in range(a.rounds):
        order = ks[r % len(ks):] + ks[:r % len(ks)]  # alternate which k runs first
        for k in order:
            res = rate_holding(a.data, k, epochs=a.epochs, io_engines=a.io_engines)
            rates[k].append(res["samples_s"])
            detail[k].append(res)
            print(json.dumps({"round": r, "k": k, **{n: round(v, 2) for n, v in res.items()}}), flush=True)
    base = statistics.median(rates[ks[0]])
    print(f"\n{a.files} files x {a.per_file} samples of 3x224x224 uint8, warm, global shuffle, batch 256; "
          f"epochs 1-{a.epochs - 1} of each run timed; median of {a.rounds} rounds (cores: {os.cpu_count()})")
    print("| k held | samples/s | vs k=0 | look-ahead batches (median) |\n|---|---|---|---|")
    out = {}
    for k in ks:
        med = statistics.median(rates[k])
        look = statistics.median(d["lookahead_median"] for d in detail[k])
        out[k] = {"samples_s": med, "ratio": med / base, "lookahead": look, "rounds": rates[k]}
        print(f"| {k} | {med:,.0f} | {med / base:.2f} | {look:g} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
