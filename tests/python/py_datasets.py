# SPDX-License-Identifier: Apache-2.0
"""Learnable datasets for the Python-package tests, written with numpy, h5py and
TensorFlow (not with dlfeed), and resident-memory readings. conftest.py makes the
session's ``learnable`` fixture from them; test modules in every folder import them
(tests/python is on sys.path: conftest.py's folder).

Sample k has label k % 10 and x = 0.1 * noise with x.flat[label] = 1, so a linear
model learns it in a few dozen steps.
"""
import gc
import os
import pathlib

import h5py
import numpy as np

SHAPE = (8, 8)
FORMATS = ["hdf5", "npz", "tfrecord"]


def make_samples(files, per_file, seed=0):
    n = files * per_file
    rng = np.random.default_rng(seed)
    x = (0.1 * rng.standard_normal((n, *SHAPE))).astype(np.float32)
    y = (np.arange(n) % 10).astype(np.int64)
    x.reshape(n, -1)[np.arange(n), y] = 1.0  # x.flat[label] = 1
    return x, y


def write_dataset(fmt, root, files=4, per_file=64, seed=0):
    """Writes FILES files of PER_FILE samples; returns (dir, x, y)."""
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    x, y = make_samples(files, per_file, seed)
    for f in range(files):
        xs, ys = x[f * per_file:(f + 1) * per_file], y[f * per_file:(f + 1) * per_file]
        path = root / f"part_{f:03d}.{ 'tfrecord' if fmt == 'tfrecord' else fmt}"
        if fmt == "npz":
            np.savez(path, x=xs, y=ys)
        elif fmt == "hdf5":
            with h5py.File(path, "w") as h:
                h["records"] = xs
                h["labels"] = ys
        elif fmt == "tfrecord":
            import tensorflow as tf

            with tf.io.TFRecordWriter(str(path)) as w:
                for xi, yi in zip(xs, ys):
                    ex = tf.train.Example(features=tf.train.Features(feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[xi.tobytes()])),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)])),
                    }))
                    w.write(ex.SerializeToString())
        else:
            raise ValueError(fmt)
    return root, x, y


def shuffled_epoch(path, batch_size, seed, **kw):
    """One global_shuffle epoch of dlfeed.Loader(path): (the sample ids in order, each batch's
    fields as arrays)."""
    import dlfeed

    loader = dlfeed.Loader(path, batch_size=batch_size, strategy="global_shuffle", seed=seed, **kw)
    ids, fields = [], []
    for batch in loader:
        ids.append(np.array(batch.sample_ids))
        fields.append([np.array(batch[k]) for k in batch.keys()])
    loader.close()
    return np.concatenate(ids), fields


def assert_same_epoch(local, remote, x):
    """Two shuffled_epoch() results equal, batch by batch and field by field, the epoch reads
    every sample once, and the first field is x's rows in the epoch's order."""
    (local_ids, local_fields), (remote_ids, remote_fields) = local, remote
    np.testing.assert_array_equal(remote_ids, local_ids)
    assert sorted(remote_ids.tolist()) == list(range(len(x)))
    for a, b in zip(local_fields, remote_fields):
        for fa, fb in zip(a, b):
            np.testing.assert_array_equal(fb, fa)
    np.testing.assert_array_equal(np.concatenate([f[0] for f in remote_fields]), x[remote_ids])


def epoch_by_id(loader, epoch):
    """Epoch `epoch` of a one-field loader as {sample id: that sample's array}."""
    return {int(i): np.array(row) for b in loader.iter_epoch(epoch) for i, row in zip(b.sample_ids, b[b.keys()[0]])}


def assert_every_row(got, x):
    """`got` (epoch_by_id's) holds every row of `x` once, each byte for byte at its sample id."""
    assert sorted(got) == list(range(len(x))) and all(np.array_equal(got[i], x[i]) for i in got)


def loader_kwargs(fmt):
    """The Loader keywords that give (x [B, 8, 8] float32, y [B] int64) for FMT."""
    if fmt == "npz":
        return dict(fields=["x", "y"])
    if fmt == "hdf5":
        return dict(fields=["records", "labels"])
    return dict(fields=["image", "label"], feature_dtype="float32", shapes={"image": SHAPE, "label": ()})


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_growth(run, passes, warm=2):
    """Resident bytes gained over PASSES calls of RUN, after WARM calls that
    fill pools, allocators and caches (garbage collected before each reading)."""
    for _ in range(warm):
        run()
    gc.collect()
    before = rss_bytes()
    for _ in range(passes):
        run()
    gc.collect()
    return rss_bytes() - before


def write_with_hidden(root):
    """a.npy and sub/b.npy (10 rows each), and what a notebook, macOS or an editor leaves beside them:
    .ipynb_checkpoints/a-checkpoint.npy, ._a.npy, sub/.h/q.npy, .x.npy (rows of 9s)."""
    (root / "sub" / ".h").mkdir(parents=True)
    (root / ".ipynb_checkpoints").mkdir()
    np.save(root / "a.npy", np.zeros((10, 3), np.float32))
    np.save(root / "sub" / "b.npy", np.ones((10, 3), np.float32))
    for p in (root / ".ipynb_checkpoints" / "a-checkpoint.npy", root / "._a.npy", root / "sub" / ".h" / "q.npy",
              root / ".x.npy"):
        np.save(p, np.full((10, 3), 9, np.float32))
