#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Samples from 4 B to 4 MiB, warm page cache, global shuffle (issue 17):
dlfeed reading the files (`dlfeed run --resident off`), dlfeed holding them in
memory (`--resident auto`, the default when the files fit in half the memory
budget), the same from Python (dlfeed.Loader), a numpy memmap fancy-index
gather over the same HDF5 datasets in a random order of the same batch size
(the memory-speed reference), and PyTorch's DataLoader over an h5py Dataset
(per-sample __getitem__, what users write). Alternating, medians; a table in
docs/performance.md and a plot in docs/img/small_samples.png.

    .venv/bin/python bench/small_samples.py            # writes docs/performance.md and the PNG
    .venv/bin/python bench/small_samples.py --quick    # smaller, prints only
"""
import argparse
import bisect
import json
import os
import re
import sys
import time

import h5py
import numpy as np

import _benchlib as bl
from _benchlib import DLFEED, ROOT

FILES = 4
# name, sample shape (float32), samples in all (FILES files), epochs per measurement. The datasets
# stay within half of dlfeed's default memory budget (1024 MiB), so --resident auto holds them;
# the epochs after the first make each measurement of the held systems last a few tenths of a
# second or more.
SIZES = [
    ("4 B", [1], 2_000_000, 3),
    ("64 B", [16], 1_000_000, 4),
    ("1 KiB", [256], 131_072, 8),
    ("4 KiB", [1024], 65_536, 8),
    ("64 KiB", [16384], 4_096, 12),
    ("1 MiB", [262144], 448, 24),
    ("4 MiB", [1048576], 112, 24),
]
MAX_BATCH, MIN_BATCH, BATCH_BYTES = 1024, 8, 16 << 20
TORCH_WORKERS = (0, 2)
SYSTEMS = ["off", "auto", "python", "memmap"] + [f"torch{w}" for w in TORCH_WORKERS]
LABELS = {"off": "dlfeed C++, read (--resident off)", "auto": "dlfeed C++, held (--resident auto)",
          "python": "dlfeed Python (dlfeed.Loader, held)", "memmap": "numpy memmap gather",
          **{f"torch{w}": f"PyTorch DataLoader + h5py, {w} workers" for w in TORCH_WORKERS}}


def sample_bytes(shape):
    return 4 * int(np.prod(shape))


def batch_size(shape):
    """At most MAX_BATCH samples and about BATCH_BYTES a batch, at least MIN_BATCH samples."""
    return min(MAX_BATCH, max(MIN_BATCH, BATCH_BYTES // sample_bytes(shape)))


def size_tag(name):
    return name.replace(" ", "").replace("i", "").lower()  # "64 KiB" -> "64kb"


# ---------------------------------------------------------------- the systems

def dlfeed_held(path, batch):
    """Whether `dlfeed run --resident auto` holds the dataset (the line it prints at create)."""
    out = bl.sh([DLFEED, "run", "--fields", "records", "--strategy", "global_shuffle", "--batch-size", batch,
                 "--resident", "auto", "--epochs", 0, path])
    return "dataset held in memory" in out


def split_rates(samples, secs):
    """{'first': epoch 0's samples/s, 'later': the later epochs' samples over their seconds}."""
    later = sum(secs[1:])
    return {"first": samples[0] / secs[0], "later": sum(samples[1:]) / later if later > 0 else float("nan")}


def dlfeed_rate(path, resident, batch, epochs, seed):
    """`dlfeed run`: each epoch's samples over its wall time, as its `epoch N:` line says (create,
    and with it the held read, not counted)."""
    out = bl.sh([DLFEED, "run", "--fields", "records", "--strategy", "global_shuffle", "--batch-size", batch,
                 "--epochs", epochs, "--seed", seed, "--resident", resident, path])
    got = re.findall(r"^epoch \d+: \d+ batches, (\d+) samples in ([\d.]+) s", out, re.M)
    if len(got) != epochs:
        raise RuntimeError(f"expected {epochs} epoch lines in: {out[-2000:]}")
    return split_rates([int(n) for n, _ in got], [float(t) for _, t in got])


def child(kind, **kw):
    """Runs this script as a fresh Python process measuring one system; its JSON line."""
    env = dict(os.environ, PYTHONPATH=bl.PYTHONPATH)
    cmd = [sys.executable, __file__, "--child", kind, "--child-args", json.dumps(kw)]
    return json.loads(bl.sh(cmd, env=env, timeout=600).strip().splitlines()[-1])


def python_child(path, batch, epochs, seed):
    """dlfeed.Loader: create timed on its own; the rate is over the epochs' iteration only."""
    import dlfeed

    t0 = time.perf_counter()
    loader = dlfeed.Loader(path, fields=["records"], batch_size=batch, strategy="global_shuffle", seed=seed,
                           resident="auto")
    t1 = time.perf_counter()
    samples, secs = [], []
    for _ in range(epochs):
        t, n = time.perf_counter(), 0
        for b in loader:
            n += len(b["records"])
        secs.append(time.perf_counter() - t)
        samples.append(n)
    stats = loader.stats()
    return {**split_rates(samples, secs), "create_s": t1 - t0, "held": stats["resident_bytes"] > 0,
            "resident": stats["resident_reason"]}


class H5Records:
    """The files' "records" datasets as one map-style Dataset, a sample per
    __getitem__ (h5py slicing one row). Files are opened on first use in each
    process: DataLoader workers fork after __init__, and an h5py handle must
    not cross a fork."""

    def __init__(self, files):
        self.files, self.begin = files, [0]
        for f in files:
            with h5py.File(f, "r") as h:
                self.begin.append(self.begin[-1] + h["records"].shape[0])
        self.sets = None

    def __len__(self):
        return self.begin[-1]

    def __getitem__(self, i):
        if self.sets is None:
            self.sets = [h5py.File(f, "r")["records"] for f in self.files]
        k = bisect.bisect_right(self.begin, i) - 1
        return self.sets[k][i - self.begin[k]]


def torch_child(path, batch, epochs, seed, workers, cap_s):
    """DataLoader(shuffle=True: a global permutation per epoch), default collate.
    The clock starts at the first iter() (worker start included) and stops after
    the batch that passes cap_s, or at the end of the epochs; the rate is the
    samples delivered over that time."""
    import pathlib

    import torch
    import torch.utils.data

    ds = H5Records(sorted(str(p) for p in pathlib.Path(path).glob("*.hdf5")))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0,
                                     generator=torch.Generator().manual_seed(seed))
    n, t0, capped = 0, time.perf_counter(), False
    for _ in range(epochs):
        for b in dl:
            n += len(b)
            if time.perf_counter() - t0 >= cap_s:
                capped = True
                break
        if capped:
            break
    secs = time.perf_counter() - t0
    return {"rate": n / secs, "samples": n, "seconds": secs, "capped": capped}


def memmap_rate(path, batch, epochs, seed):
    """The files' records datasets as memmaps; each epoch a random order,
    `batch` samples per fancy-index gather (a copy, as a batch is; one per
    file the batch touches, not joined into one array)."""
    maps = []
    for f in sorted(path.glob("*.hdf5")):
        with h5py.File(f, "r") as h:
            d = h["records"]
            maps.append(np.memmap(f, dtype=d.dtype, mode="r", offset=d.id.get_offset(), shape=d.shape))
    per = maps[0].shape[0]
    n = per * len(maps)
    orders = [np.random.default_rng([seed, e]).permutation(n) for e in range(epochs)]
    secs = []
    for order in orders:
        t = time.perf_counter()
        for b in range(0, n, batch):
            ids = order[b:b + batch]
            f, k = ids // per, ids % per
            for j in np.unique(f):
                out = maps[j][k[f == j]]  # noqa: F841 - the gather is what is timed
        secs.append(time.perf_counter() - t)
    return split_rates([n] * epochs, secs)


# ---------------------------------------------------------------- report

EPOCHED = ["off", "auto", "python", "memmap"]  # rates of epoch 0 and of the later epochs


def fmt_rate(x):
    return "–" if x != x else f"{x:,.0f}"


def plot(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["bytes"] for r in rows]
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(13, 4.8))
    style = {"off": ("tab:blue", "o", ":"), "auto": ("tab:blue", "o", "-"), "python": ("tab:green", "s", "-"),
             "memmap": ("black", "D", "--"), "torch0": ("tab:red", "v", "-"), "torch2": ("tab:orange", "^", "-")}

    def rate(r, s, which="later"):
        return r["med"][s][which] if s in EPOCHED else r["med"][s]

    for s in SYSTEMS:
        color, marker, line = style[s]
        label = LABELS[s] + (", later epochs" if s in EPOCHED else "")
        ax.plot(xs, [rate(r, s) for r in rows], color=color, marker=marker, linestyle=line, label=label)
        if s in ("off", "auto", "python"):
            rx.plot(xs, [rate(r, s) / rate(r, "memmap") for r in rows], color=color, marker=marker, linestyle=line,
                    label=label)
    ax.plot(xs, [rate(r, "auto", "first") for r in rows], color="tab:blue", marker="x", linestyle="-", alpha=0.35,
            label=LABELS["auto"] + ", epoch 0")
    rx.axhline(0.8, color="grey", linestyle="--", linewidth=1, label="goal: 0.8x the memmap gather")
    for a in (ax, rx):
        a.set_xscale("log")
        a.set_xticks(xs)
        a.set_xticklabels([r["name"] for r in rows])
        a.minorticks_off()
        a.set_xlabel("sample size (float32)")
        a.grid(True, which="major", alpha=0.3)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s")
    rx.set_ylabel("samples/s over the numpy memmap gather's")
    rx.set_ylim(0, max(1.2, max(np.max(ln.get_ydata()) for ln in rx.get_lines()) * 1.05))
    ax.legend(fontsize=7)
    rx.legend(fontsize=7)
    ax.set_title("HDF5, 4 files, warm page cache, global shuffle")
    rx.set_title("dlfeed relative to the numpy memmap gather (later epochs)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def section(rows, args, repeats, m, png_rel):
    n = len(rows)

    def ratio(r, s, which):
        return r["med"][s][which] / r["med"]["memmap"][which]

    met_held = [r["name"] for r in rows if ratio(r, "auto", "later") >= 0.8]
    met_py = [r["name"] for r in rows if ratio(r, "python", "later") >= 0.8]
    not_held = [r["name"] for r in rows if not (r["held"] and r["py_held"])]
    cmd = "    .venv/bin/python bench/small_samples.py" + (" --quick" if args.quick else "")
    if not args.quick and repeats != 5:
        cmd += f" --repeats {repeats}"
    lines = [
        "## Samples from 4 B to 4 MiB: dlfeed (C++ and Python), numpy memmap, PyTorch + h5py",
        "",
        f"{bl.machine_line(m)}, commit {bl.git_commit()}, by",
        "",
        cmd,
        "",
        f"Medians of {repeats} alternating runs per system (each in a fresh process, but for the memmap gather, "
        f"which runs in the script's); HDF5 written by `dlfeed generate`, {FILES} files, float32 samples, warm page "
        "cache (the files read once before the runs), global shuffle (a new permutation of all samples each "
        "epoch). Each run is the *epochs* of the table; each rate cell gives the later epochs' samples over "
        "their time and, in parentheses, epoch 0's alone (the first epoch pays for the loader's fresh batch "
        "buffers, or for the gather's fresh mapping); the ratios are of the later epochs (epoch 0's in "
        f"parentheses). A batch holds at most {MAX_BATCH} samples and about {BATCH_BYTES >> 20} MiB, at least "
        f"{MIN_BATCH} samples, the same for every system.",
        "",
        "- *read*: `dlfeed run --resident off` (a read request per sample or coalesced run); *held*: `dlfeed run "
        "--resident auto` (the files, within half the 1024 MiB memory budget, read once, from create on; every "
        "read then a copy from memory). Rates from `dlfeed run`'s `epoch N:` lines (create not counted).",
        "- *Python*: `dlfeed.Loader(path, fields=[\"records\"], batch_size=B, strategy=\"global_shuffle\", "
        "seed=S, resident=\"auto\")` in a fresh interpreter, `for batch in loader: batch[\"records\"]` per epoch; "
        "the rates time the iteration only; create (index and the held read) is timed apart: *create s*.",
        "- *numpy memmap*: a fancy-index gather per batch from np.memmap views of the same datasets, one per "
        "file the batch touches (no decode, no batch assembly beyond the copy). The goal: dlfeed, "
        "held and Python, at 0.8x it or more.",
        "- *PyTorch + h5py*: `torch.utils.data.DataLoader(dataset, batch_size=B, shuffle=True, num_workers=W, "
        "persistent_workers=W > 0)`, default collate, over a map-style Dataset whose `__getitem__` returns one "
        "row of a file's `records` through h5py (files opened lazily in each process), with W = "
        f"{' and '.join(map(str, TORCH_WORKERS))} on {m['cores']} cores. The clock starts at the first `iter()` "
        f"(worker start included) and stops after the batch that passes {args.torch_cap:g} s, or at the end "
        "of the epochs; where it stopped early (marked \\*) the rate is that of the samples delivered until "
        "then, standing for the whole epoch. *Python / PyTorch*: dlfeed Python's later epochs over the "
        "better of the two worker counts.",
        "",
        f"Held / memmap is 0.8 or more at {len(met_held)} of {n} sizes"
        + (f" ({', '.join(met_held)})" if met_held else "")
        + f", Python / memmap at {len(met_py)} of {n}" + (f" ({', '.join(met_py)})" if met_py else "") + "."
        + (f" Not held at {', '.join(not_held)}." if not_held else ""),
        "",
        "| sample | samples x epochs | batch | read samples/s | held samples/s | Python samples/s | create s | "
        "numpy memmap samples/s | "
        + " | ".join(f"PyTorch + h5py, {w} workers" for w in TORCH_WORKERS)
        + " | held / memmap | Python / memmap | Python / PyTorch |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(TORCH_WORKERS) + "---|---|---|",
    ]
    for r in rows:
        med = r["med"]
        both = {s: f"{fmt_rate(med[s]['later'])} ({fmt_rate(med[s]['first'])})" for s in EPOCHED}
        torch_best = max(med[f"torch{w}"] for w in TORCH_WORKERS)
        lines.append(
            f"| {r['name']} | {r['total']:,} x {r['epochs']} | {r['batch']} | {both['off']} | {both['auto']} | "
            f"{both['python']} | {r['create_s']:.3f} | {both['memmap']} | "
            + " | ".join(fmt_rate(med[f"torch{w}"]) + ("\\*" if r["capped"][w] else "") for w in TORCH_WORKERS)
            + f" | {ratio(r, 'auto', 'later'):.2f} ({ratio(r, 'auto', 'first'):.2f}) | "
            f"{ratio(r, 'python', 'later'):.2f} ({ratio(r, 'python', 'first'):.2f}) | "
            f"{med['python']['later'] / torch_best:,.1f}x |")
    if png_rel:
        lines += ["", f"![samples/s against sample size]({png_rel})"]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "data" / "bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--torch-cap", type=float, default=None, help="seconds of PyTorch per run (default 2, quick 0.5)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    ap.add_argument("--png", default=None,
                    help="the plot (default docs/img/small_samples.png; with --quick only where given)")
    ap.add_argument("--child", choices=["python", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--child-args", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kw = json.loads(args.child_args)
        print(json.dumps(python_child(**kw) if args.child == "python" else torch_child(**kw)), flush=True)
        return
    if args.torch_cap is None:
        args.torch_cap = 0.5 if args.quick else 2.0
    repeats = 1 if args.quick else args.repeats
    m = bl.machine()
    t_start = time.perf_counter()
    rows = []
    for name, shape, total, epochs in SIZES:
        nbytes = sample_bytes(shape)
        if args.quick:
            total = max(8 * FILES, min(total, 65_536, (64 << 20) // nbytes)) // FILES * FILES
            epochs = 2
        batch = batch_size(shape)
        per = total // FILES
        path = bl.pathlib.Path(args.data) / f"small{size_tag(name)}-f32-{FILES}x{per}"
        bl.generate(path, ["--format", "hdf5", "--files", FILES, "--samples-per-file", per, "--shape",
                           ",".join(map(str, shape)), "--dtype", "float32"])
        bl.warm([path])
        held = dlfeed_held(path, batch)
        got = {s: [] for s in SYSTEMS}
        capped = {w: False for w in TORCH_WORKERS}
        create, py_held = [], True
        for r in range(repeats):
            seed = 42 + r
            for system in bl.rotated(SYSTEMS, r):
                if system in ("off", "auto"):
                    got[system].append(dlfeed_rate(path, system, batch, epochs, seed))
                elif system == "memmap":
                    got[system].append(memmap_rate(path, batch, epochs, seed))
                elif system == "python":
                    res = child("python", path=str(path), batch=batch, epochs=epochs, seed=seed)
                    got[system].append(res)
                    create.append(res["create_s"])
                    py_held = py_held and res["held"]
                else:
                    w = int(system[len("torch"):])
                    res = child("torch", path=str(path), batch=batch, epochs=epochs, seed=seed, workers=w,
                                cap_s=args.torch_cap)
                    got[system].append(res["rate"])
                    capped[w] = capped[w] or res["capped"]
        med = {s: ({k: bl.median([g[k] for g in got[s]]) for k in ("first", "later")} if s in EPOCHED
                   else bl.median(got[s])) for s in SYSTEMS}
        row = {"name": name, "bytes": nbytes, "total": total, "epochs": epochs, "batch": batch, "med": med,
               "held": held, "py_held": py_held, "create_s": bl.median(create), "capped": capped}
        rows.append(row)
        mm = med["memmap"]["later"]
        print(f"{name} (batch {batch}, {total:,} x {epochs}), samples/s, later epochs (epoch 0): "
              + ", ".join(f"{s} {med[s]['later']:,.0f} ({med[s]['first']:,.0f})" for s in EPOCHED)
              + ", " + ", ".join(f"{s} {med[s]:,.0f}" for s in SYSTEMS if s not in EPOCHED)
              + f"; held/memmap {med['auto']['later'] / mm:.2f}, Python/memmap {med['python']['later'] / mm:.2f}"
              + ("" if held and py_held else " (NOT HELD)")
              + f" [{time.perf_counter() - t_start:.0f} s]", flush=True)
    m["load_end"] = f"{bl.os.getloadavg()[0]:.1f}"
    out = bl.pathlib.Path(args.out)
    png = bl.pathlib.Path(args.png or ROOT / "docs" / "img" / "small_samples.png")
    body = section(rows, args, repeats, m, None if args.quick else os.path.relpath(png, out.parent))
    print(body)
    if args.png or not args.quick:
        plot(rows, png)
        print(f"wrote {png}")
    if not args.quick:
        bl.replace_section(out, "bench/small_samples", body)
        print(f"wrote {out} in {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
