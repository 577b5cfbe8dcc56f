# SPDX-License-Identifier: Apache-2.0
"""Train a tiny PyTorch model from a dlfeed dataset, with mid-epoch checkpoints.

    build/tools/dlfeed generate --format hdf5 --dir data/ex --files 8 --samples-per-file 128 \\
        --shape 8,8 --dtype float32
    PYTHONPATH=python:build/python .venv/bin/python examples/torch_train.py data/ex \\
        --fields records,labels
    # under torch.distributed: torchrun --nproc-per-node 2 examples/torch_train.py ... --distributed

No DataLoader workers: dlfeed's C++ threads read and decode; the tensors are
dlfeed's own memory (zero copy through DLPack).
"""
import argparse
import os

import torch

import dlfeed.torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="dataset folder or file")
    p.add_argument("--fields", default="records,labels", help="input and label fields, e.g. x,y or image,label")
    p.add_argument("--feature-dtype", default=None, help="TFRecord: dtype of the image bytes (float32)")
    p.add_argument("--sample-shape", default=None, help="TFRecord: shape of one input sample, e.g. 8,8")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--checkpoint", default=None, help="save/resume the model and loader position here")
    p.add_argument("--distributed", action="store_true", help="init torch.distributed (gloo) from torchrun's env")
    a = p.parse_args()

    if a.distributed:
        torch.distributed.init_process_group("gloo")
    x_field, y_field = a.fields.split(",")
    shapes = {y_field: ()}
    if a.sample_shape:
        shapes[x_field] = tuple(int(d) for d in a.sample_shape.split(","))
    ds = dlfeed.torch.Dataset(a.data, fields=[x_field, y_field], batch_size=a.batch_size,
                              strategy="global_shuffle", seed=1, feature_dtype=a.feature_dtype, shapes=shapes)
    x0, _ = next(iter(ds))
    ds.set_epoch(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(a.classes))
    model(x0.float())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if a.checkpoint and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        ds.load_state_dict(ck["data"])
        print(f"resumed at epoch {ds.epoch}")

    while ds.epoch < a.epochs:
        epoch, total, n = ds.epoch, 0.0, 0
        for step, (x, y) in enumerate(ds):
            loss = torch.nn.functional.cross_entropy(model(x.float()), y.long())
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + loss.item(), n + 1
            if a.checkpoint and step % 50 == 49:  # mid-epoch: the loader position is part of it
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "data": ds.state_dict()},
                           a.checkpoint)
        print(f"rank {ds.rank}/{ds.world_size} epoch {epoch}: {n} batches, mean loss {total / max(n, 1):.4f}")
    if a.distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
