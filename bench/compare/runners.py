#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One system of the side-by-side comparison, measured in its own process.

    python bench/compare/runners.py SYSTEM --data DIR --batch-size 32 [--cold] ...

Every system follows the same protocol as bench/compare/compare_cpp.cc:
build the loader (untimed), read `--warmup-batches` batches of a first epoch
(worker processes, threads, tf.function tracing start up), wait `--settle-s`
for the read-ahead to finish, drop the files' cached pages when `--cold`,
then time one whole epoch from the moment its iterator is created to its last
batch (a tf.data iterator is destroyed after that: its teardown, which waits
for TensorFlow's autotune thread, is reported as `tf_teardown_s`). Every batch
is consumed in place, without a copy: one byte per 4 KiB of every sample of
every field is summed (`touch`), which also proves every system delivered the
same samples (the sum is order-independent). Prints one JSON line.

Systems:
  dlfeed_py     dlfeed.Loader (numpy batches in dlfeed's memory)
  dlfeed_torch  dlfeed.torch.Dataset (torch tensors via DLPack)
  dlfeed_tf     dlfeed.tf.dataset (a tf.data.Dataset fed by dlfeed)
  torch_h5py    torch DataLoader(shuffle=True, num_workers=--workers) over an h5py
                Dataset that opens the files lazily in each worker
  torch_npy     the same over .npy files memory-mapped lazily in each worker
  tf_data       TFRecordDataset over the files, interleave, shuffle(--buffer-size),
                batch, parse_example + decode_raw, prefetch(AUTOTUNE)
"""
from __future__ import annotations

import argparse
import bisect
import glob
import json
import os
import pathlib
import resource
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import _benchlib as bl  # noqa: E402

SEED = 42

# tf.data iterators of the timed epoch. Destroying one waits for its autotune
# thread (TensorFlow 2.21: up to ~0.5 s, whatever the pipeline), so the clock
# stops at the last batch, as for every system, and the teardown is reported
# on its own (tf_teardown_s).
KEEP: list = []


def as_numpy(arr) -> np.ndarray:
    """A batch array as numpy, zero copy: torch tensors (CPU) via .numpy(), tf
    tensors via np.asarray (the tensor's buffer; tf's .numpy() would copy it)."""
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr) if type(arr).__module__.startswith("tensorflow") else arr.numpy()
    return np.ascontiguousarray(arr)


def touch(a: np.ndarray) -> int:
    """Sum of one byte per 4 KiB of every sample of a batch array."""
    b = a.view(np.uint8).reshape(a.shape[0], -1)
    return int(b[:, ::4096].sum(dtype=np.uint64))


def cpu_s() -> float:
    """User + system CPU seconds of this process, all its threads (not of worker processes)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def data_files(root: str, *exts: str):
    files = sorted(f for ext in exts for f in glob.glob(os.path.join(root, "**", f"*.{ext}"), recursive=True))
    if not files:
        raise SystemExit(f"no {'/'.join(exts)} files under {root}")
    return files


# ---------------------------------------------------------------- dlfeed

def dlfeed_kwargs(a):
    kw = dict(fields=a.fields or None, batch_size=a.batch_size, strategy=a.strategy, seed=SEED)
    if a.strategy == "buffered_shuffle":
        kw["buffer_size"] = a.buffer_size
    if a.cold:
        kw["resident"] = "off"  # a cold run measures reads: a dataset held in memory would not be read
    return kw


def make_dlfeed_py(a):
    import dlfeed

    loader = dlfeed.Loader(a.data, **dlfeed_kwargs(a))

    def epoch():
        for batch in loader.iter_epoch(1):  # epoch 1, as compare_cpp and raw_read --epoch 1
            yield [batch[k] for k in batch.keys()]

    return loader.iter_epoch(0), epoch, None


def make_dlfeed_torch(a):
    import dlfeed.torch

    ds = dlfeed.torch.Dataset(a.data, **dlfeed_kwargs(a))
    as_list = lambda b: list(b) if isinstance(b, (tuple, list)) else [b]  # noqa: E731
    warm = iter(ds)  # epoch 0

    def epoch():
        ds.set_epoch(1)
        for b in ds:
            yield as_list(b)

    return warm, epoch, None


def make_dlfeed_tf(a):
    import dlfeed
    import dlfeed.tf

    loader = dlfeed.Loader(a.data, **dlfeed_kwargs(a))
    ds = dlfeed.tf.dataset(a.data, loader=loader)
    as_list = lambda b: list(b) if isinstance(b, (tuple, list)) else [b]  # noqa: E731

    def epoch():
        loader.epoch = 1  # the abandoned warm-up pass left the loader at epoch 0
        it = iter(ds)
        KEEP.append(it)  # destroyed after the clock stops (see tf_teardown)
        for b in it:
            yield as_list(b)

    return iter(ds), epoch, None


# ---------------------------------------------------------------- PyTorch

def make_torch(a, dataset):
    import torch
    import torch.utils.data

    torch.manual_seed(SEED)
    dl = torch.utils.data.DataLoader(dataset, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                                     persistent_workers=a.workers > 0, drop_last=False)
    as_list = lambda b: list(b) if isinstance(b, (tuple, list)) else [b]  # noqa: E731

    def epoch():
        for b in dl:
            yield as_list(b)

    return iter(dl), epoch, as_list


class H5Samples:
    """Samples of `fields` across HDF5 files (samples on the first axis). Files
    are opened on first use in each process (DataLoader workers fork after
    __init__, and an h5py handle must not cross a fork: pytorch #11929);
    small 1-D fields such as labels are read whole at that open."""

    def __init__(self, files, fields):
        import h5py

        self.files, self.fields = files, fields
        self.begin = [0]
        for f in files:
            with h5py.File(f, "r") as h:
                self.begin.append(self.begin[-1] + h[fields[0]].shape[0])
        self._open = {}

    def __len__(self):
        return self.begin[-1]

    def _file(self, k):
        h = self._open.get(k)
        if h is None:
            import h5py

            f = h5py.File(self.files[k], "r")
            h = [f[n] if f[n].ndim > 1 or f[n].nbytes > (1 << 20) else f[n][()] for n in self.fields]
            h.append(f)
            self._open[k] = h
        return h

    def __getitem__(self, i):
        k = bisect.bisect_right(self.begin, i) - 1
        h = self._file(k)
        j = i - self.begin[k]
        return tuple(np.asarray(h[n][j]) for n in range(len(self.fields)))


class NpySamples:
    """Samples of .npy files (samples on the first axis), memory-mapped on first
    use in each process; __getitem__ copies the sample out of the map."""

    def __init__(self, files):
        self.files = files
        self.begin = [0]
        for f in files:
            self.begin.append(self.begin[-1] + np.load(f, mmap_mode="r").shape[0])
        self._maps = {}

    def __len__(self):
        return self.begin[-1]

    def __getitem__(self, i):
        k = bisect.bisect_right(self.begin, i) - 1
        m = self._maps.get(k)
        if m is None:
            m = self._maps[k] = np.load(self.files[k], mmap_mode="r")
        return np.array(m[i - self.begin[k]])


def make_torch_h5py(a):
    return make_torch(a, H5Samples(data_files(a.data, "h5", "hdf5"), a.fields))


def make_torch_npy(a):
    return make_torch(a, NpySamples(data_files(a.data, "npy")))


# ---------------------------------------------------------------- tf.data

def tf_data_pipeline(a):
    """tf.data's own pipeline over the TFRecord files: (image uint8 [B, n], size int64 [B]) batches."""
    import tensorflow as tf

    files = data_files(a.data, "tfrecord")
    image, size = a.fields or ["image", "size"]
    spec = {image: tf.io.FixedLenFeature([], tf.string), size: tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):  # a batch of Examples at once (the vectorized map)
        ex = tf.io.parse_example(serialized, spec)
        return tf.io.decode_raw(ex[image], tf.uint8), ex[size]

    AUTOTUNE = tf.data.AUTOTUNE
    ds = (tf.data.Dataset.from_tensor_slices(files)
          .shuffle(len(files), seed=SEED)
          .interleave(tf.data.TFRecordDataset, num_parallel_calls=AUTOTUNE, deterministic=False)
          .shuffle(a.buffer_size, seed=SEED)
          .batch(a.batch_size)
          .map(parse, num_parallel_calls=AUTOTUNE)
          .prefetch(AUTOTUNE))
    return ds


def make_tf_data(a):
    ds = tf_data_pipeline(a)

    def epoch():
        it = iter(ds)
        KEEP.append(it)  # destroyed after the clock stops (see tf_teardown)
        for b in it:
            yield list(b)

    return iter(ds), epoch, list


MAKERS = {
    "dlfeed_py": make_dlfeed_py,
    "dlfeed_torch": make_dlfeed_torch,
    "dlfeed_tf": make_dlfeed_tf,
    "torch_h5py": make_torch_h5py,
    "torch_npy": make_torch_npy,
    "tf_data": make_tf_data,
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("system", choices=sorted(MAKERS))
    ap.add_argument("--data", required=True, help="dataset folder")
    ap.add_argument("--fields", default="", help="comma-separated fields (HDF5 datasets, TFRecord features)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--strategy", default="global_shuffle", help="dlfeed systems' order")
    ap.add_argument("--buffer-size", type=int, default=10000, help="shuffle buffer (tf.data, buffered_shuffle)")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    ap.add_argument("--warmup-batches", type=int, default=4)
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--cold", action="store_true")
    a = ap.parse_args(argv)
    a.fields = [f for f in a.fields.split(",") if f]

    t = time.perf_counter()
    warm_it, epoch, _ = MAKERS[a.system](a)
    rss_base = bl.tree_rss_kib(os.getpid())
    for _ in range(a.warmup_batches):
        if next(warm_it, None) is None:
            break
    create_s = time.perf_counter() - t
    if a.system == "tf_data" or a.system == "dlfeed_tf":
        del warm_it  # a tf iterator reads ahead until destroyed
    time.sleep(a.settle_s)
    if a.cold:
        bl.evict([a.data])
    rss_before = bl.tree_rss_kib(os.getpid())

    samples = nbytes = total = 0
    cpu0 = cpu_s()
    t0 = time.perf_counter()
    for fields in epoch():
        samples += len(fields[0])
        for f in fields:
            f = as_numpy(f)
            total += touch(f)
            nbytes += f.nbytes
    secs = time.perf_counter() - t0
    cpu = cpu_s() - cpu0
    t1 = time.perf_counter()
    KEEP.clear()
    teardown = time.perf_counter() - t1
    print(json.dumps({"system": a.system, "samples": samples, "bytes": int(nbytes), "seconds": secs,
                      "touch": total, "rss_base_kib": rss_base, "rss_before_kib": rss_before,
                      "setup_s": create_s, "tf_teardown_s": teardown, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
