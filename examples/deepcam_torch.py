# SPDX-License-Identifier: Apache-2.0
"""DeepCAM's training tensors from its own files, as MLPerf HPC's reference loader gives them.

    build/tools/dlfeed run --workload deepcam --scale 1e-6 --data-dir data/deepcam --compute-ms 0
    PYTHONPATH=python:build/python .venv/bin/python examples/deepcam_torch.py data/deepcam

DATA holds train/data-YYYY-MM-DD-HH-R.h5 (one sample each: climate/data (H, W, 16)
float32, climate/labels_0 (H, W)) and stats.h5 (climate/minval, climate/maxval per
channel). The reference (mlcommons/hpc deepcam/src/deepCam/data/cam_hdf5_dataset.py)
reads each file with h5py, keeps the channels it trains on, scales them to [0, 1]
with stats.h5's min and max, moves channels first (HWC -> CHW) and gives labels as
int64. Here dlfeed reads whole files (axis="none": one sample per file) on its own
threads, and the same arithmetic runs once per batch on the batch tensor (on the GPU
when there is one), never per sample in Python.
"""
import argparse
import os

import h5py
import numpy as np
import torch

import dlfeed.torch


def normalisation(stats_path, channels):
    """The reference's shift and scale per channel: minval, 1 / (maxval - minval), as float32."""
    with h5py.File(stats_path, "r") as f:
        minval = f["climate/minval"][...][channels]
        maxval = f["climate/maxval"][...][channels]
    shift = minval.astype(np.float32)
    scale = (1.0 / (maxval - minval)).astype(np.float32)
    return torch.from_numpy(shift), torch.from_numpy(scale)


def dataset(data_dir, batch_size, **kwargs):
    """Batches of (data (B, H, W, C) float32, labels (B, H, W) float32) from DATA/train."""
    return dlfeed.torch.Dataset(os.path.join(data_dir, "train"), axis="none",
                                fields=["climate/data", "climate/labels_0"], batch_size=batch_size, **kwargs)


def to_training(x, y, shift, scale, channels):
    """One batch as the reference gives it: (B, C, H, W) float32 in [0, 1] and (B, H, W) int64."""
    x = x[..., channels] if channels is not None else x
    x = scale.to(x.device) * (x - shift.to(x.device))  # the reference: data_scale * (data - data_shift)
    return x.permute(0, 3, 1, 2).contiguous(), y.to(torch.int64)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="DeepCAM's folder: train/ and stats.h5")
    p.add_argument("--batch-size", type=int, default=2, help="local batch (the reference's is 2)")
    p.add_argument("--channels", default="0-15", help="channels to train on: 0-15, or a list 0,1,2,10")
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    if "-" in a.channels:
        lo, hi = (int(v) for v in a.channels.split("-"))
        channels = list(range(lo, hi + 1))
    else:
        channels = [int(v) for v in a.channels.split(",")]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shift, scale = normalisation(os.path.join(a.data, "stats.h5"), channels)
    ds = dataset(a.data, a.batch_size, strategy="global_shuffle", seed=1, drop_last_batch=True)
    for epoch in range(a.epochs):
        n = 0
        for x, y in ds:
            x, y = to_training(x.to(device, non_blocking=True), y.to(device, non_blocking=True), shift, scale,
                               channels)
            n += x.shape[0]
        print(f"epoch {epoch}: {n} samples, last batch {tuple(x.shape)} {x.dtype} in "
              f"[{float(x.min()):.3f}, {float(x.max()):.3f}], labels {tuple(y.shape)} {y.dtype}")


if __name__ == "__main__":
    main()
