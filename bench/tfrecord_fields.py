#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An image and its label, as TensorFlow writes ImageNet-style records (`x`
raw uint8 bytes of 3x224x224, `y` an int64), against the same samples in
HDF5 (h5py: `x` (N, 3, 224, 224) uint8, `y` (N,) int64), warm, global
shuffle, batch 256, from Python (`dlfeed.Loader`) and the CLI (`dlfeed run`):

- hdf5: fields x, y;
- tfrecord shaped: `shapes={"x": (3, 224, 224), "y": ()}, dtypes={"x": np.uint8}`
  (CLI `--field-shapes 'x=3,224,224;y=' --field-dtypes x=uint8`): each field's
  shape reaches the loader, the image is read straight into the batch;
- tfrecord 1-D: fields x, y without shapes, each batch's x reshaped in Python
  (what `shapes=` was before it reached the loader: a view).

Rounds alternate the cases' order; prints medians and the ratios to HDF5.

    .venv/bin/python bench/tfrecord_fields.py --rounds 5            # 20 epochs a run
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

FILES, PER_FILE, SHAPE = 4, 1024, (3, 224, 224)

PY = r"""
import sys, time, numpy as np, dlfeed
path, case, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
kw = dict(fields=["x", "y"], batch_size=256, strategy="global_shuffle", seed=1, resident="off")
if case == "shaped":
    kw.update(shapes={"x": (3, 224, 224), "y": ()}, dtypes={"x": np.uint8})
loader = dlfeed.Loader(path, **kw)
n, t = 0, 0.0
for e in range(epochs):
    t0 = time.perf_counter()
    for b in loader.iter_epoch(e):
        x = np.asarray(b["x"])
        if case == "flat":
            x = x.reshape(len(x), 3, 224, 224)
        if e:
            n += len(x)
    if e:
        t += time.perf_counter() - t0
print(n / t)
"""


def write(data: pathlib.Path) -> None:
    """The same samples twice: TFRecord by TensorFlow, HDF5 by h5py."""
    if (data / "done").exists():
        return
    import h5py
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    (data / "tfrecord").mkdir(parents=True, exist_ok=True)
    (data / "hdf5").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for f in range(FILES):
        x = rng.integers(0, 256, size=(PER_FILE, *SHAPE), dtype=np.uint8)
        y = rng.integers(0, 1000, size=PER_FILE, dtype=np.int64)
        with tf.io.TFRecordWriter(str(data / "tfrecord" / f"part-{f}.tfrecord")) as w:
            for img, lab in zip(x, y):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(lab)])),
                })).SerializeToString())
        with h5py.File(data / "hdf5" / f"part-{f}.h5", "w") as h:
            h["x"] = x
            h["y"] = y
    (data / "done").touch()


def cli(path: pathlib.Path, case: str, epochs: int) -> float:
    extra = ["--field-shapes", "x=3,224,224;y=", "--field-dtypes", "x=uint8"] if case == "shaped" else []
    out = bl.sh([bl.DLFEED, "run", "--quiet", "--strategy", "global_shuffle", "--epochs", epochs, "--fields", "x,y",
                 "--batch-size", 256, "--resident", "off", *extra, path])
    rows = [(float(m.group(1)), int(m.group(2))) for m in re.finditer(r"^[1-9]\d*\s+([\d.]+)\s+\d+\s+(\d+)\s", out, re.M)]
    return sum(n for _, n in rows) / sum(t for t, _ in rows)


def python(path: pathlib.Path, case: str, epochs: int) -> float:
    env = dict(os.environ, PYTHONPATH=f"{bl.ROOT / 'python'}:{bl.ROOT / 'build' / 'python'}")
    return float(bl.sh([sys.executable, "-c", PY, path, case, epochs], env=env).strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(bl.ROOT / "data" / "bench" / "tfrecord_fields"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=20,
                    help="epochs per run (the rate is over 1..; at 100k samples/s an epoch of 4,096 lasts about 40 ms, so a few epochs measure mostly noise)")
    args = ap.parse_args()
    data = pathlib.Path(args.data)
    write(data)
    paths = {"hdf5": data / "hdf5", "shaped": data / "tfrecord", "flat": data / "tfrecord"}
    for p in {data / "hdf5", data / "tfrecord"}:  # both cached alike: dropped, then read in large reads
        bl.evict([p])
        bl.warm([p])
    got = {}
    for r in range(args.rounds):
        for case in bl.rotated(list(paths), r):
            got.setdefault((case, "py"), []).append(python(paths[case], case, args.epochs))
            if case != "flat":
                got.setdefault((case, "cli"), []).append(cli(paths[case], case, args.epochs))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"{args.rounds} rounds, medians, samples/s; {bl.machine_line(bl.machine())}; {time.strftime('%Y-%m-%d %H:%M')}")
    print("| from | HDF5 | TFRecord shaped | / HDF5 | TFRecord 1-D + reshape | / HDF5 |")
    print("|---|---|---|---|---|---|")
    h, s, f = med[("hdf5", "py")], med[("shaped", "py")], med[("flat", "py")]
    print(f"| Python | {h:,.0f} | {s:,.0f} | {s / h:.2f} | {f:,.0f} | {f / h:.2f} |")
    h, s = med[("hdf5", "cli")], med[("shaped", "cli")]
    print(f"| CLI | {h:,.0f} | {s:,.0f} | {s / h:.2f} | | |")


if __name__ == "__main__":
    main()
