# SPDX-License-Identifier: Apache-2.0
"""The reference workloads' files as their reference code writes them (h5py, numpy,
TensorFlow): DeepCAM's HDF5 samples and CosmoFlow's GZIP TFRecords. Shared by
api/test_reference_workloads.py, api/test_fields_and_shapes.py and
packaging/test_reference_examples.py (tests/python is on sys.path: conftest.py's folder)."""
import h5py
import numpy as np


def deepcam_file(path, h, w, c, seed):
    """One sample as MLPerf HPC's DeepCAM stores it (h5py, group climate/)."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((h, w, c)).astype(np.float32) * np.arange(1, c + 1, dtype=np.float32)
    labels = rng.integers(0, 3, size=(h, w)).astype(np.float32)
    with h5py.File(path, "w") as f:
        g = f.create_group("climate")
        g["data"] = data
        g["data_stats"] = np.stack([data.mean((0, 1)), data.max((0, 1)), data.min((0, 1)), data.std((0, 1))])
        g["labels_0"] = labels
        g["labels_0_stats"] = np.zeros((7, 1), np.float32)
        g["labels_1"] = labels
        g["labels_1_stats"] = np.zeros((7, 1), np.float32)
    return data, labels


def deepcam_folder(root, n, h=6, w=8, c=16):
    train = root / "train"
    train.mkdir(parents=True)
    arrays = {}
    for i in range(n):
        name = f"data-2106-01-{1 + i // 8:02d}-{(i % 8) * 3:02d}-1.h5"
        arrays[name] = deepcam_file(train / name, h, w, c, seed=i)
    allx = np.stack([a[0] for a in arrays.values()])
    with h5py.File(root / "stats.h5", "w") as f:
        g = f.create_group("climate")
        g["count"] = np.full(c, allx[..., 0].size, np.float64)
        g["mean"] = allx.mean((0, 1, 2)).astype(np.float64)
        g["sqmean"] = (allx.astype(np.float64) ** 2).mean((0, 1, 2))
        g["minval"] = allx.min((0, 1, 2)).astype(np.float64)
        g["maxval"] = allx.max((0, 1, 2)).astype(np.float64)
    return train, arrays


def write_cosmoflow_tfrecords(folder, n, shape):
    """MLPerf HPC CosmoFlow v1.0: one GZIP TFRecord per sample, x int16 bytes, y float_list[4]."""
    import tensorflow as tf  # noqa: PLC0415
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    want = []
    for i in range(n):
        x = rng.integers(0, 300, shape).astype(np.int16)
        y = rng.standard_normal(4).astype(np.float32)
        ex = tf.train.Example(features=tf.train.Features(feature={
            "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[x.tobytes()])),
            "y": tf.train.Feature(float_list=tf.train.FloatList(value=y)),
        }))
        with tf.io.TFRecordWriter(str(folder / f"univ_{i:03d}.tfrecord"), options="GZIP") as w:
            w.write(ex.SerializeToString())
        want.append((x, y))
    return want
