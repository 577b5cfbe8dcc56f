# SPDX-License-Identifier: Apache-2.0
"""CosmoFlow's training tensors from its own files, as MLPerf HPC's reference loader gives them.

    build/tools/dlfeed run --workload cosmoflow --scale 1e-6 --data-dir data/cosmoflow --compute-ms 0
    PYTHONPATH=python:build/python .venv/bin/python examples/cosmoflow_torch.py data/cosmoflow/train
    # NVIDIA's npy conversion (NAME_data.npy int16 + NAME_label.npy float32):
    PYTHONPATH=python:build/python .venv/bin/python examples/cosmoflow_torch.py FOLDER --npy

The reference (mlcommons/hpc cosmoflow/data/cosmo.py) reads one GZIP TFRecord per
sample, decodes `x` as int16 into (128, 128, 128, 4), casts it to float32 and applies
log1p; `y` is float32[4]. Here dlfeed reads and inflates the records on its own threads
and the cast and log1p run once per batch on the batch tensor (on the GPU when there
is one), never per sample in Python.
"""
import argparse

import torch

import dlfeed.torch

SHAPE = (128, 128, 128, 4)


def dataset(folder, batch_size, npy=False, shape=SHAPE, **kwargs):
    """Batches of (x (B, *shape) int16, y (B, 4) float32)."""
    if npy:  # NAME_data.npy + NAME_label.npy, paired by NAME
        return dlfeed.torch.Dataset(folder, fields={"x": "*_data.npy", "y": "*_label.npy"}, axis="none",
                                    batch_size=batch_size, **kwargs)
    return dlfeed.torch.Dataset(folder, fields=["x", "y"], feature_dtype="int16", shapes={"x": tuple(shape)},
                                batch_size=batch_size, **kwargs)


def to_training(x, y):
    """The reference's arithmetic on a batch: float32, log1p."""
    return torch.log1p(x.to(torch.float32)), y.to(torch.float32)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="folder of .tfrecord files (or of NAME_data.npy/NAME_label.npy with --npy)")
    p.add_argument("--npy", action="store_true", help="NVIDIA's npy conversion")
    p.add_argument("--batch-size", type=int, default=4, help="local batch (the reference's is 4)")
    p.add_argument("--shape", default=",".join(map(str, SHAPE)), help="TFRecord: the shape of x")
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = tuple(int(d) for d in a.shape.split(","))
    ds = dataset(a.data, a.batch_size, npy=a.npy, shape=shape, strategy="file_shuffle", seed=1)
    for epoch in range(a.epochs):
        n = 0
        for x, y in ds:
            x, y = to_training(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            n += x.shape[0]
        print(f"epoch {epoch}: {n} samples, last batch x {tuple(x.shape)} {x.dtype}, y {tuple(y.shape)}")


if __name__ == "__main__":
    main()
