#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Large samples (1 to 256 MiB) against the machine's own read of the same files.

For each sample size: one-sample files written by h5py (a contiguous float32
dataset, as DeepCAM's are), by numpy (np.savez, one array) and, with
--formats cosmoflow, by TensorFlow as MLPerf HPC's CosmoFlow files are (one
gzip TFRecord per sample: `x` int16 bytes, `y` 4 floats; the yardstick then
reads the compressed files), about --set-mib MiB of them. Warm page cache, global shuffle, side by side in
alternating rounds:

- `pread_yardstick`: as many threads as cores, each reading whole files with
  pread in 8 MiB pieces into a buffer touched beforehand (bench/pread_yardstick.cc);
- `dlfeed run --resident off`: the loader reading the files every epoch; the
  first epoch and the median of the later ones, the time `Loader::create` took
  to index the files (its `open` counter) and the first epoch's time to its
  first batch;
- `dlfeed run` with its defaults (the set is held when it fits in half the
  memory budget, which follows the machine);
- PyTorch's DataLoader over an h5py Dataset (HDF5 only, --torch), one worker per core.

--cold adds one cold epoch per system (pages dropped with posix_fadvise
before each; a VM's host may still cache them), and fio when installed
(`apt-get install fio`): io_uring, buffered, 2 MiB reads (dlfeed's large
pieces; 1 MiB for 1 MiB samples) with 2 per core in flight (the fewest dlfeed keeps in flight
cold), over the same files; --cold-rounds N repeats the three N times in a
rotated order (medians; the table gives each round's dlfeed / fio too), and
--rounds 0 skips the warm rounds.

    .venv/bin/python bench/large_samples.py                  # 1,4,16,64,256 MiB, ~1 GiB each
    .venv/bin/python bench/large_samples.py --sizes 64 --rounds 3 --torch
Writes a JSON file of every measurement (--out) and prints a table of medians.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Optional

import _benchlib as bl
import numpy as np
from _benchlib import BUILD, DLFEED, ROOT

YARD = BUILD / "bench" / "pread_yardstick"


def write_set(folder: pathlib.Path, fmt: str, mib: int, files: int) -> list:
    """`files` one-sample files of `mib` MiB each (float32), written once."""
    stamp = folder / ".written"
    want = f"{fmt} {mib} {files}"
    if stamp.exists() and stamp.read_text() == want:
        return sorted(str(p) for p in folder.iterdir() if p.name != ".written")
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    n = mib * (1 << 20) // 4
    rng = np.random.default_rng(mib)
    for i in range(files):
        x = rng.random(n, dtype=np.float32)
        if fmt == "hdf5":
            import h5py
            with h5py.File(folder / f"sample{i:04d}.h5", "w") as f:
                f.create_dataset("data", data=x.reshape(1, n))
        elif fmt == "npz":
            np.savez(folder / f"sample{i:04d}.npz", x=x.reshape(1, n))
        else:  # cosmoflow: MLPerf HPC's files, one gzip TFRecord per sample: x int16 bytes, y 4 float32
            import tensorflow as tf
            xi = rng.integers(0, 50, size=mib * (1 << 20) // 2, dtype=np.int16)
            ex = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[xi.tobytes()])),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(4).tolist()))}))
            opts = tf.io.TFRecordOptions(compression_type="GZIP")
            with tf.io.TFRecordWriter(str(folder / f"univ_{i:04d}.tfrecord"), opts) as w:
                w.write(ex.SerializeToString())
    stamp.write_text(want)
    return sorted(str(p) for p in folder.iterdir() if p.name != ".written")


def yardstick(files: list, rounds: int) -> float:
    out = bl.sh([YARD, "--rounds", rounds, *files])
    return json.loads(out)["median_gb_per_s"]


def dlfeed_run(folder: pathlib.Path, batch: int, epochs: int, extra: list, tmp: pathlib.Path) -> dict:
    summary = tmp / "summary.json"
    if folder.name.startswith("cosmoflow"):
        extra = [*extra, "--fields", "x,y", "--field-dtypes", "x=int16"]
    else:
        extra = [*extra, "--axis", "none"]
    bl.sh([DLFEED, "run", "--quiet", "--strategy", "global_shuffle", "--batch-size", batch,
           "--epochs", epochs, "--summary-json", summary, *extra, folder])
    s = json.loads(summary.read_text())
    eps = s["epochs"]
    rates = [e["bytes_read"] / e["wall_s"] / 1e9 for e in eps if e["wall_s"] > 0]
    delivered = [e["bytes_delivered"] / e["wall_s"] / 1e9 for e in eps if e["wall_s"] > 0]
    return {"first_gb_per_s": delivered[0], "later_gb_per_s": bl.median(delivered[1:]) if len(delivered) > 1 else None,
            "read_gb_per_s": rates, "first_step_s": eps[0].get("first_step_s"),
            "index_s": s["counters"]["open_ns"]["value"] / 1e9,
            "io_operations": eps[-1].get("io_operations"), "planned_reads": eps[-1].get("planned_reads"),
            "memory_budget": s["run"].get("memory_budget"), "prefetch": s["run"].get("prefetch")}


def fio_rate(folder: pathlib.Path, mib: int, cores: int) -> Optional[float]:
    """GB/s of fio reading the folder's files once, cold (its invalidate drops their pages first), as dlfeed's
    large route reads: io_uring, buffered, 2 MiB reads (1 MiB for 1 MiB samples: fio skips a file smaller
    than its block), 2 per core in flight; None without fio."""
    if shutil.which("fio") is None:
        return None
    out = bl.sh(["fio", "--name=cold", "--rw=read", f"--bs={min(2, mib)}M", f"--iodepth={2 * cores}",
                 "--ioengine=io_uring", "--direct=0", "--invalidate=1", "--output-format=json", f"--opendir={folder}"])
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return job["bw_bytes"] / 1e9


def torch_rate(files: list, batch: int, workers: int) -> float:
    """PyTorch's DataLoader + h5py, as users write it: one sample per __getitem__."""
    code = f"""
import sys, time, h5py, numpy as np, torch
from torch.utils.data import DataLoader, Dataset
files = {files!r}
class D(Dataset):
    def __len__(self): return len(files)
    def __getitem__(self, i):
        with h5py.File(files[i], "r") as f:
            return torch.from_numpy(f["data"][0])
dl = DataLoader(D(), batch_size={batch}, shuffle=True, num_workers={workers})
for b in dl: pass
t0 = time.perf_counter(); n = 0
for b in dl: n += b.numel() * 4
print(n / (time.perf_counter() - t0) / 1e9)
"""
    return float(bl.sh([sys.executable, "-c", code]).strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,16,64,256", help="sample sizes in MiB")
    ap.add_argument("--formats", default="hdf5,npz")
    ap.add_argument("--set-mib", type=int, default=1024, help="MiB of files per size and format")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4, help="dlfeed epochs per run (the first is reported apart)")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--cold-rounds", type=int, default=1,
                    help="cold rounds per case (yardstick, dlfeed and fio in a rotated order each; medians)")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--data", default=str(ROOT / "data" / "bench" / "large"))
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    bl.require(DLFEED, YARD, targets="dlfeed_cli pread_yardstick")
    cores = os.cpu_count() or 1
    tmp = pathlib.Path(a.data) / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    results = {"machine": bl.machine(), "commit": bl.git_commit(), "cores": cores, "args": vars(a), "cases": []}
    for fmt in a.formats.split(","):
        for mib in (int(s) for s in a.sizes.split(",")):
            files_n = max(4, a.set_mib // mib)
            folder = pathlib.Path(a.data) / f"{fmt}-{mib}mib"
            files = write_set(folder, fmt, mib, files_n)
            batch = max(1, min(16, 256 // mib))
            case = {"format": fmt, "mib": mib, "files": files_n, "batch": batch, "rounds": []}
            bl.warm([folder])
            for r in range(a.rounds):
                one = {}
                systems = ["yard", "off", "auto"] + (["torch"] if a.torch and fmt == "hdf5" else [])
                for name in bl.rotated(systems, r):
                    if name == "yard":
                        one["yard"] = yardstick(files, 3)
                    elif name == "off":
                        one["off"] = dlfeed_run(folder, batch, a.epochs, ["--resident", "off"], tmp)
                    elif name == "auto":
                        one["auto"] = dlfeed_run(folder, batch, a.epochs, [], tmp)
                    else:
                        one["torch"] = torch_rate(files, batch, cores)
                case["rounds"].append(one)
                print(json.dumps({"format": fmt, "mib": mib, "round": r, **one}), flush=True)
            if a.cold:
                got: dict = {"yard": [], "off": [], "fio": []}
                for r in range(a.cold_rounds):
                    for name in bl.rotated(["yard", "off", "fio"], r):
                        bl.evict([folder])
                        if name == "yard":
                            got["yard"].append(json.loads(bl.sh([YARD, "--rounds", 1, *files]))["median_gb_per_s"])
                        elif name == "off":
                            run = dlfeed_run(folder, batch, 1, ["--resident", "off"], tmp)
                            got["off"].append(run["first_gb_per_s"])
                        else:
                            got["fio"].append(fio_rate(folder, mib, cores))
                case["cold_rounds"] = got
                case["cold_yard"] = bl.median(got["yard"])
                case["cold_off"] = bl.median(got["off"])
                case["cold_fio"] = None if None in got["fio"] else bl.median(got["fio"])
                bl.warm([folder])
            results["cases"].append(case)
    out = pathlib.Path(a.out or tmp / f"large_samples-{int(time.time())}.json")
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out}\n")
    print("| format | sample | batch | yardstick GB/s | dlfeed read (later epochs) | / yardstick | first epoch / later "
          "| index s | first step s | I/O ops per sample | dlfeed default | PyTorch + h5py |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in (c for c in results["cases"] if c["rounds"]):  # (--rounds 0: the cold rounds only)
        def med(f, rounds=c["rounds"]):
            return bl.median([f(r) for r in rounds])
        y = med(lambda r: r["yard"])
        later = med(lambda r: r["off"]["later_gb_per_s"])
        first = med(lambda r: r["off"]["first_gb_per_s"])
        step = med(lambda r: r["off"]["first_step_s"] or 0)
        index = med(lambda r: r["off"]["index_s"])
        ops = c["rounds"][-1]["off"]["io_operations"] / c["files"]
        auto = med(lambda r: r["auto"]["later_gb_per_s"])
        tor = med(lambda r: r["torch"]) if "torch" in c["rounds"][0] else None
        print(f"| {c['format']} | {c['mib']} MiB | {c['batch']} | {y:.2f} | {later:.2f} | {later / y:.2f} | "
              f"{first / later:.2f} | {index:.3f} | {step:.3f} | {ops:.0f} | {auto:.2f} | "
              f"{'' if tor is None else f'{tor:.2f}'} |")
    cold = [c for c in results["cases"] if "cold_off" in c]
    if cold:
        print("\n| format | sample | cold: yardstick GB/s | fio GB/s | dlfeed GB/s | dlfeed / fio | rounds "
              "(medians) | dlfeed / fio, each round |")
        print("|---|---|---|---|---|---|---|---|")
        for c in cold:
            fio = c.get("cold_fio")
            fio_txt = "" if fio is None else f"{fio:.2f}"
            ratio = "" if fio is None else f"{c['cold_off'] / fio:.2f}"
            each = "" if fio is None else ", ".join(
                f"{d / f:.2f}" for d, f in zip(c["cold_rounds"]["off"], c["cold_rounds"]["fio"]))
            print(f"| {c['format']} | {c['mib']} MiB | {c['cold_yard']:.2f} | {fio_txt} | {c['cold_off']:.2f} "
                  f"| {ratio} | {len(c['cold_rounds']['off'])} | {each} |")

if __name__ == "__main__":
    main()
