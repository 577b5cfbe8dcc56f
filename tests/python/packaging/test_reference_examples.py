# SPDX-License-Identifier: Apache-2.0
"""examples/deepcam_torch.py and examples/cosmoflow_torch.py give the tensors the
reference loaders give (issue 26): on fixture files written by h5py, numpy and
TensorFlow in the workloads' own layouts, every batch equals the reference's
arithmetic written out here in numpy/h5py as the reference code does it
(mlcommons/hpc deepcam cam_hdf5_dataset.py; cosmoflow data/cosmo.py)."""
import importlib.util
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import ROOT
from workload_files import deepcam_folder, write_cosmoflow_tfrecords

pytest.importorskip("torch")


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_deepcam(root, n, h=12, w=20, c=16):
    """DeepCAM's files and stats.h5 (test_reference_workloads.deepcam_folder): their paths, in order."""
    train, arrays = deepcam_folder(root, n, h, w, c)
    return [train / name for name in arrays]


def deepcam_reference(path, stats_path, channels):
    """cam_hdf5_dataset.py's arithmetic for one file, in numpy."""
    with h5py.File(stats_path, "r") as f:
        data_shift = f["climate"]["minval"][channels].astype(np.float32)
        data_scale = (1.0 / (f["climate"]["maxval"][channels] - f["climate"]["minval"][channels])).astype(np.float32)
    with h5py.File(path, "r") as f:
        data = f["climate"]["data"][..., channels]
        label = f["climate"]["labels_0"][...].astype(np.int64)
    data = data_scale * (data - data_shift)
    return np.transpose(data, (2, 0, 1)), label


@pytest.mark.parametrize("channels", [list(range(16)), [0, 1, 2, 10]])
def test_deepcam_example_gives_the_references_tensors(tmp_path, channels):
    import torch  # noqa: PLC0415
    ex = load_example("deepcam_torch")
    paths = write_deepcam(tmp_path, 5)
    shift, scale = ex.normalisation(tmp_path / "stats.h5", channels)
    ds = ex.dataset(tmp_path, 2, strategy="sequential")
    k = 0
    for x, y in ds:
        x, y = ex.to_training(x, y, shift, scale, channels)
        assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.is_contiguous()
        for b in range(x.shape[0]):
            want_x, want_y = deepcam_reference(paths[k], tmp_path / "stats.h5", channels)
            assert x[b].shape == want_x.shape == (len(channels), 12, 20)
            np.testing.assert_array_equal(x[b].numpy(), want_x)
            np.testing.assert_array_equal(y[b].numpy(), want_y)
            k += 1
    assert k == 5


def test_deepcam_example_runs(tmp_path):
    write_deepcam(tmp_path, 4)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, ROOT / "examples" / "deepcam_torch.py", tmp_path, "--channels", "0,1,2"],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    assert "epoch 0: 4 samples, last batch (2, 3, 12, 20) torch.float32 in [" in out, out
    assert "labels (2, 12, 20) torch.int64" in out, out


def write_cosmoflow(folder, n, shape):
    """CosmoFlow's GZIP TFRecords (test_reference_workloads.write_cosmoflow_tfrecords): their paths, in order."""
    write_cosmoflow_tfrecords(folder, n, shape)
    return sorted(folder.glob("univ_*.tfrecord"))


def cosmoflow_reference(path, shape):
    """cosmo.py's arithmetic for one file: decode_raw int16, reshape, float32, log1p."""
    import tensorflow as tf  # noqa: PLC0415
    (rec,) = list(tf.data.TFRecordDataset(str(path), compression_type="GZIP"))
    ex = tf.train.Example.FromString(rec.numpy())
    x = np.frombuffer(ex.features.feature["x"].bytes_list.value[0], np.int16).reshape(shape)
    y = np.array(ex.features.feature["y"].float_list.value, np.float32)
    return np.log1p(x.astype(np.float32)), y


def test_cosmoflow_example_gives_the_references_tensors(tmp_path):
    import torch  # noqa: PLC0415
    ex = load_example("cosmoflow_torch")
    shape = (8, 8, 8, 4)
    paths = write_cosmoflow(tmp_path / "train", 5, shape)
    k = 0
    for x, y in ex.dataset(tmp_path / "train", 2, shape=shape, strategy="sequential"):
        x, y = ex.to_training(x, y)
        assert x.dtype == torch.float32 and x.shape[1:] == shape
        for b in range(x.shape[0]):
            want_x, want_y = cosmoflow_reference(paths[k], shape)
            np.testing.assert_allclose(x[b].numpy(), want_x, rtol=2e-7, atol=0)
            np.testing.assert_array_equal(y[b].numpy(), want_y)
            k += 1
    assert k == 5


def test_cosmoflow_example_reads_npy_pairs(tmp_path):
    ex = load_example("cosmoflow_torch")
    rng = np.random.default_rng(9)
    want = []
    for i in range(3):
        x = rng.integers(0, 1000, (8, 8, 8, 4)).astype(np.int16)
        y = rng.standard_normal(4).astype(np.float32)
        np.save(tmp_path / f"univ_{i:03d}_data.npy", x)
        np.save(tmp_path / f"univ_{i:03d}_label.npy", y)
        want.append((np.log1p(x.astype(np.float32)), y))  # the reference's arithmetic on the same values
    k = 0
    for x, y in ex.dataset(tmp_path, 2, npy=True, strategy="sequential"):
        x, y = ex.to_training(x, y)
        for b in range(x.shape[0]):
            np.testing.assert_allclose(x[b].numpy(), want[k][0], rtol=2e-7, atol=0)
            np.testing.assert_array_equal(y[b].numpy(), want[k][1])
            k += 1
    assert k == 3


def test_cosmoflow_example_runs(tmp_path):
    write_cosmoflow(tmp_path, 3, (8, 8, 8, 4))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, ROOT / "examples" / "cosmoflow_torch.py", tmp_path, "--shape", "8,8,8,4",
                          "--batch-size", "2"], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout
    assert "epoch 0: 3 samples, last batch x (1, 8, 8, 8, 4) torch.float32, y (1, 4)" in out, out
