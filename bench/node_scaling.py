#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Does dlfeed use the whole node? (issue 29) On any machine, from the Python
API only (a wheel is enough: numpy and h5py; torch for the DataLoader rows):

  A. warm 147 KiB samples (3x224x224 uint8 + int64 label, HDF5), global
     shuffle, batch 256: the default I/O engines against hand-set 1/2/4/8/16
     (up to the cores), read from the files;
  B. the same held in memory (resident="on", the gather route) against read;
  C. gzip-chunked HDF5 (64x64x4 float32, a chunk per sample), decode-bound:
     dlfeed.Loader with threads 1, 2, 4, ... up to the cores and the default;
     dlfeed.torch.Dataset (threads = cores) against PyTorch's DataLoader + h5py
     with workers = cores, and the `dlfeed run` command on the same data;
  E. TFRecord (CRC checked) against HDF5, the same 147 KiB samples + label
     written both ways by `dlfeed generate`, from dlfeed.Loader and `dlfeed run`.

D's and E's command rows, and E itself, need the `dlfeed` command: the wheel's
(dlfeed/bin/dlfeed), else $DLFEED_BIN, else build/tools/dlfeed; without one
they are left out and the output says so.

Each rate is samples over the seconds of whole epochs after a warm-up epoch,
run until at least --seconds have passed; rounds alternate the cases and the
table gives medians. Writes OUT/node_scaling.json and OUT/node_scaling.md.

  python bench/node_scaling.py --out /tmp/ns            # < 4 min on 16 cores
  python bench/node_scaling.py --out /tmp/ns --quick    # < 2 min on 2 cores

In a source tree, set PYTHONPATH=python:build/python (as the tests do).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402 (stdlib only: evict, warm)


def cores() -> int:
    """The cores this process may use (affinity; dlfeed's stats() add the cgroup quota)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ------------------------------------------------------------------ data

def write_image_file(path: str, n: int, seed: int) -> None:
    import h5py

    rng = np.random.default_rng(seed)
    block = rng.integers(0, 256, size=(64, 3, 224, 224), dtype=np.uint8)
    with h5py.File(path + ".tmp", "w") as f:
        d = f.create_dataset("records", shape=(n, 3, 224, 224), dtype=np.uint8)
        for s in range(0, n, 64):
            k = min(64, n - s)
            d[s:s + k] = np.roll(block, s, axis=0)[:k] ^ np.uint8(s // 64)
        f.create_dataset("labels", data=np.arange(n, dtype=np.int64) % 1000)
    os.replace(path + ".tmp", path)


def write_gzip_file(path: str, n: int, seed: int) -> None:
    import h5py

    rng = np.random.default_rng(seed)
    with h5py.File(path + ".tmp", "w") as f:
        # Normal values to 2 decimals, shuffle filter, gzip level 1 (as the GPU node's
        # first measurement wrote them): inflating each 64 KiB chunk is the work.
        d = f.create_dataset("records", shape=(n, 64, 64, 4), dtype=np.float32, chunks=(1, 64, 64, 4),
                             compression="gzip", compression_opts=1, shuffle=True)
        for s in range(0, n, 256):
            k = min(256, n - s)
            d[s:s + k] = np.round(rng.standard_normal((k, 64, 64, 4)), 2).astype(np.float32)
    os.replace(path + ".tmp", path)


def make_data(root: pathlib.Path, image_files: int, image_per_file: int, gzip_files: int,
              gzip_per_file: int) -> dict:
    jobs = []
    img = root / f"img_{image_files}x{image_per_file}"
    gz = root / f"gzip_{gzip_files}x{gzip_per_file}"
    img.mkdir(parents=True, exist_ok=True)
    gz.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(cores(), 8))) as pool:
        for i in range(image_files):
            p = img / f"img_{i:03d}.hdf5"
            if not p.exists():
                jobs.append(pool.submit(write_image_file, str(p), image_per_file, i))
        for i in range(gzip_files):
            p = gz / f"gz_{i:03d}.hdf5"
            if not p.exists():
                jobs.append(pool.submit(write_gzip_file, str(p), gzip_per_file, 100 + i))
        for j in jobs:
            j.result()
    return {"image": str(img), "gzip": str(gz), "generate_s": time.perf_counter() - t0,
            "image_bytes": sum(p.stat().st_size for p in img.glob("*.hdf5"))}


def warm(path: str) -> None:
    """Drops the files' cached pages, then reads them through: every format's
    files are cached as a first sequential read leaves them (the kernel's
    read-ahead folios), not as their writer's write sizes left them. TFRecord
    files just written a record at a time, read warm, spent 9.3% of the run's
    CPU in the kernel's page-cache lookups (filemap_get_read_batch), 2.2% once
    evicted and read through (bench/tfrecord_route.py does the same)."""
    bl.evict([path])
    bl.warm([path])


def dlfeed_command():
    """The `dlfeed` command: the installed wheel's, $DLFEED_BIN, or an in-tree build's; None if none."""
    try:
        from dlfeed import _cli

        exe = _cli.binary()
        if exe is not None:
            return str(exe)
    except Exception:  # noqa: BLE001
        pass
    for cand in (os.environ.get("DLFEED_BIN"), pathlib.Path(__file__).resolve().parents[1] / "build/tools/dlfeed"):
        if cand and pathlib.Path(cand).is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def make_tfrecord_pair(exe: str, root: pathlib.Path, files: int, per_file: int) -> dict:
    """The same 3x224x224 uint8 samples + label as TFRecord and as HDF5 (`dlfeed generate`, same seed)."""
    out = {}
    for fmt in ("tfrecord", "hdf5"):
        d = root / f"pair_{fmt}_{files}x{per_file}"
        if not (d / ".done").exists():
            subprocess.run([exe, "generate", "--dir", str(d), "--format", fmt, "--files", str(files),
                            "--samples-per-file", str(per_file), "--shape", "3,224,224", "--dtype", "uint8",
                            "--seed", "7"], check=True, capture_output=True)
            (d / ".done").write_text("")
        out[fmt] = str(d)
    return out


def cli_rate(exe: str, path: str, seconds: float, fields: str, batch: int, threads: int = 0) -> dict:
    """`dlfeed run`: samples over the seconds of its epochs after the first (enough epochs for `seconds`)."""
    import re

    def run(epochs):
        cmd = [exe, "run", "--strategy", "global_shuffle", "--epochs", str(epochs), "--fields", fields,
               "--batch-size", str(batch), "--threads", str(threads), "--resident", "off", path]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        got = [(int(n), float(t)) for n, t in
               re.findall(r"^epoch \d+: \d+ batches, (\d+) samples in ([\d.]+) s", out, re.M)]
        if len(got) < 2:
            raise RuntimeError(out[-1000:])
        return got

    got = run(3)
    per_epoch = sum(t for _, t in got[1:]) / (len(got) - 1)
    if 2 * per_epoch < seconds:
        got = run(1 + min(200, int(seconds / max(per_epoch, 1e-3)) + 1))
    later = got[1:]
    return {"rate": sum(n for n, _ in later) / sum(t for _, t in later), "samples": sum(n for n, _ in later),
            "seconds": sum(t for _, t in later)}


# ------------------------------------------------------------------ dlfeed

def timed_epochs(iterable, seconds: float) -> dict:
    """One warm-up epoch, then whole epochs until `seconds` have passed: samples over
    the seconds of those epochs."""
    for _ in iterable:
        pass
    n, t0 = 0, time.perf_counter()
    while True:
        for b in iterable:
            n += len(b)
        secs = time.perf_counter() - t0
        if secs >= seconds:
            break
    return {"rate": n / secs, "samples": n, "seconds": secs}


def dlfeed_rate(path: str, seconds: float, **kw) -> dict:
    """dlfeed.Loader over `path`: a warm-up epoch, then whole epochs until `seconds` passed."""
    import dlfeed

    loader = dlfeed.Loader(path, strategy="global_shuffle", seed=1, **kw)
    r = timed_epochs(loader, seconds)  # its warm-up epoch: the held read, the first touch of the buffers
    st = loader.stats()
    return {**r, "io_engines": st.get("io_engines"),
            "threads": st.get("threads"), "cores": st.get("cores"), "route": st.get("route"),
            "resident_bytes": st.get("resident_bytes")}


def dlfeed_torch_rate(path: str, seconds: float, threads: int, batch: int) -> dict:
    import torch.utils.data

    import dlfeed.torch

    ds = dlfeed.torch.Dataset(path, fields=["records"], batch_size=batch, strategy="global_shuffle", seed=1,
                              threads=threads)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    return timed_epochs(dl, seconds)


class H5Records:
    """Every file's "records" as one map-style Dataset, a sample per __getitem__
    (h5py reads and inflates its chunk); files opened in each worker."""

    def __init__(self, files):
        import h5py

        self.files, self.begin = files, [0]
        for f in files:
            with h5py.File(f, "r") as h:
                self.begin.append(self.begin[-1] + h["records"].shape[0])
        self.sets = None

    def __len__(self):
        return self.begin[-1]

    def __getitem__(self, i):
        import bisect

        import h5py

        if self.sets is None:
            self.sets = [h5py.File(f, "r")["records"] for f in self.files]
        k = bisect.bisect_right(self.begin, i) - 1
        return self.sets[k][i - self.begin[k]]


def torch_rate(path: str, seconds: float, workers: int, batch: int) -> dict:
    """DataLoader(shuffle=True) + h5py, persistent workers; clock from the second epoch."""
    import torch
    import torch.utils.data

    ds = H5Records(sorted(str(p) for p in pathlib.Path(path).glob("*.hdf5")))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0, prefetch_factor=4 if workers else None,
                                     generator=torch.Generator().manual_seed(1))
    return timed_epochs(dl, seconds)


def in_child(kind: str, **kw) -> dict:
    """One measurement in a fresh interpreter (its own threads, no fork after dlfeed's)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--child-args", json.dumps(kw)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode:
        return {"error": out.stderr[-1500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


CHILDREN = {"dlfeed": dlfeed_rate, "dlfeed_torch": dlfeed_torch_rate, "torch": torch_rate, "cli": cli_rate}


# ------------------------------------------------------------------ the run

def cases(data: dict, n: int, quick: bool) -> list:
    """(group, label, kind, kwargs) for every measurement of a round."""
    img, gz = data["image"], data["gzip"]
    out = []
    engines = [e for e in (1, 2, 4, 8, 16) if e <= max(2, n)]
    out.append(("A warm 147 KiB, read", "default engines", "dlfeed",
                dict(path=img, fields=["records", "labels"], batch_size=256, resident="off")))
    for e in engines:
        out.append(("A warm 147 KiB, read", f"io_engines={e}", "dlfeed",
                    dict(path=img, fields=["records", "labels"], batch_size=256, resident="off", io_engines=e)))
    budget = int(data["image_bytes"] * 2 + (1 << 30))
    out.append(("B held vs read (defaults)", "held (resident=on)", "dlfeed",
                dict(path=img, fields=["records", "labels"], batch_size=256, resident="on", memory_budget=budget)))
    out.append(("B held vs read (defaults)", "read (resident=off)", "dlfeed",
                dict(path=img, fields=["records", "labels"], batch_size=256, resident="off")))
    threads = sorted({t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= n} | {n})
    if quick:
        threads = sorted({1, n})
    out.append(("C gzip HDF5, dlfeed.Loader", "default threads", "dlfeed",
                dict(path=gz, fields=["records"], batch_size=64)))
    for t in threads:
        out.append(("C gzip HDF5, dlfeed.Loader", f"threads={t}", "dlfeed",
                    dict(path=gz, fields=["records"], batch_size=64, threads=t)))
    out.append(("D gzip HDF5, from PyTorch", f"dlfeed.torch.Dataset threads={n}", "dlfeed_torch",
                dict(path=gz, threads=n, batch=64)))
    out.append(("D gzip HDF5, from PyTorch", f"DataLoader+h5py workers={n}", "torch",
                dict(path=gz, workers=n, batch=64)))
    exe = data.get("cli")
    if exe:
        out.append(("D gzip HDF5, from PyTorch", "`dlfeed run` (default threads)", "cli",
                    dict(path=gz, exe=exe, fields="records", batch=64)))
    if data.get("pair"):
        tf, h5 = data["pair"]["tfrecord"], data["pair"]["hdf5"]
        out.append(("E TFRecord vs HDF5, 147 KiB + label", "TFRecord, dlfeed.Loader", "dlfeed",
                    dict(path=tf, fields=["image", "label"], batch_size=256, resident="off")))
        out.append(("E TFRecord vs HDF5, 147 KiB + label", "HDF5, dlfeed.Loader", "dlfeed",
                    dict(path=h5, fields=["records", "labels"], batch_size=256, resident="off")))
        out.append(("E TFRecord vs HDF5, 147 KiB + label", "TFRecord, `dlfeed run`", "cli",
                    dict(path=tf, exe=exe, fields="image,label", batch=256)))
        out.append(("E TFRecord vs HDF5, 147 KiB + label", "HDF5, `dlfeed run`", "cli",
                    dict(path=h5, exe=exe, fields="records,labels", batch=256)))
    return out


def table(results: dict, n: int) -> str:
    lines = []
    groups: dict = {}
    for key, rates in results.items():
        group, label = key.split("|", 1)
        groups.setdefault(group, []).append((label, rates))
    for group, rows in groups.items():
        lines += [f"### {group}", "", "| case | samples/s (median) | rounds | used |", "|---|---|---|---|"]
        best = max((statistics.median(r["rates"]) for _, r in rows if r["rates"]), default=0)
        for label, r in rows:
            med = statistics.median(r["rates"]) if r["rates"] else float("nan")
            used = ", ".join(f"{k} {v}" for k, v in r.get("used", {}).items() if v is not None)
            ratio = f" ({med / best:.2f} of best)" if best else ""
            lines.append(f"| {label} | {med:,.0f}{ratio} | {', '.join(f'{x:,.0f}' for x in r['rates'])} | {used} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for node_scaling.json and node_scaling.md (required)")
    ap.add_argument("--data", help="folder for the datasets (default OUT/data; reused when present)")
    ap.add_argument("--quick", action="store_true", help="small data, 1 round, fewer cases (< 2 min on 2 cores)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default 2; 1 with --quick)")
    ap.add_argument("--seconds", type=float, default=0, help="timed seconds per case (default 1.5; 0.7 quick)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch rows")
    ap.add_argument("--groups", default="", help="only these groups' cases, by letter (e.g. A,B,E; empty: all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-args", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kw = json.loads(a.child_args)
        print(json.dumps(CHILDREN[a.child](**kw)))
        return
    if not a.out:
        ap.error("--out is required")

    n = cores()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = a.rounds or (1 if a.quick else 2)
    seconds = a.seconds or (0.7 if a.quick else 1.5)
    # 147 KiB samples: 2048 (300 MB) quick, else 512 per core up to 8192 (1.2 GB);
    # gzip: 1024 samples quick, else 8192 (4 files x 2048).
    img_files = 4 if a.quick else 8
    img_per = 512 if a.quick else max(256, min(1024, 512 * n // img_files))
    gz_files, gz_per = (2, 512) if a.quick else (4, 2048)
    t_start = time.perf_counter()
    data = make_data(pathlib.Path(a.data) if a.data else out / "data", img_files, img_per, gz_files, gz_per)
    data["cli"] = dlfeed_command()
    if data["cli"]:
        t0 = time.perf_counter()
        pair_files, pair_per = (2, 256) if a.quick else (4, 512)
        data["pair"] = make_tfrecord_pair(data["cli"], pathlib.Path(a.data) if a.data else out / "data", pair_files,
                                          pair_per)
        data["generate_s"] += time.perf_counter() - t0
        for p in data["pair"].values():
            warm(p)
    else:
        print("no `dlfeed` command found (wheel, $DLFEED_BIN, build/tools): the command rows and E are left out",
              flush=True)
    warm(data["image"])
    warm(data["gzip"])
    print(f"data ready in {data['generate_s']:.1f} s: {data}", flush=True)
    all_cases = cases(data, n, a.quick)
    if a.no_torch:
        all_cases = [c for c in all_cases if c[2] == "dlfeed"]
    if a.groups:
        keep = {g.strip().upper() for g in a.groups.split(",") if g.strip()}
        all_cases = [c for c in all_cases if c[0].split(" ", 1)[0] in keep]
    results: dict = {}
    for r in range(rounds):
        order = all_cases if r % 2 == 0 else list(reversed(all_cases))
        for group, label, kind, kw in order:
            kw = dict(kw)
            path = kw.pop("path")
            args = dict(path=path, seconds=seconds, **kw)
            got = in_child(kind, **args)
            slot = results.setdefault(f"{group}|{label}", {"rates": [], "used": {}, "errors": []})
            if "error" in got:
                slot["errors"].append(got["error"])
                print(f"  {group} / {label}: ERROR {got['error'][-300:]}", flush=True)
                continue
            slot["rates"].append(got["rate"])
            slot["used"] = {k: got.get(k) for k in ("io_engines", "threads", "route") if k in got}
            print(f"  round {r}: {group} / {label}: {got['rate']:,.0f} samples/s", flush=True)
    total_s = time.perf_counter() - t_start
    try:
        import dlfeed

        version = getattr(dlfeed, "__version__", "?")
    except Exception:  # noqa: BLE001
        version = "?"
    meta = {"cores": n, "host_cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
            "dlfeed": version, "quick": a.quick, "rounds": rounds, "seconds_per_case": seconds,
            "total_s": total_s, "data": data}
    (out / "node_scaling.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = [f"# node_scaling ({n} cores usable, {os.cpu_count()} CPUs on the host; dlfeed {version})", "",
          f"Command: `python bench/node_scaling.py {' '.join(sys.argv[1:])}`; "
          f"{rounds} round(s), >= {seconds} s per case, medians; total {total_s:.0f} s "
          f"(data {data['generate_s']:.0f} s). `threads` below 2 runs as 2 (the source may block; decode "
          "needs a thread too); `used` is what the loader reports (LoaderStats).", "", table(results, n)]
    (out / "node_scaling.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
