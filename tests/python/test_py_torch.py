"""dlfeed.torch: training, zero copy, resume, torch.distributed (gloo, 2
processes), DataLoader workers, pin_memory."""
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import dlfeed
import dlfeed.torch as dtorch
from test_py_datasets import FORMATS, learnable, loader_kwargs, write_dataset  # noqa: F401 (fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fmt", FORMATS)
def test_tiny_model_trains_for_an_epoch(learnable, fmt):
    root, _, _ = learnable[fmt]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    ds = dtorch.Dataset(root, batch_size=8, strategy="global_shuffle", seed=1, **loader_kwargs(fmt))
    losses = []
    for x, y in ds:
        assert x.dtype == torch.float32 and x.shape[1:] == (8, 8) and y.dtype == torch.int64
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert len(losses) == 32 and ds.epoch == 1
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses


def test_torch_tensors_share_dlfeed_memory(learnable):
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=16)
    batch = next(iter(loader))
    x = torch.from_dlpack(batch.tensor("x"))
    assert x.data_ptr() == batch["x"].ctypes.data == batch.tensor("x").data_ptr
    y = dtorch.to_torch(batch, "y")
    assert y.data_ptr() == batch["y"].ctypes.data and y.dtype == torch.int64
    single = dlfeed.Loader(root, fields="x", batch_size=16)
    b = next(iter(single))
    assert torch.from_dlpack(b).data_ptr() == b["x"].ctypes.data  # a one-field batch is a DLPack tensor
    del batch, loader  # the tensors keep the memory alive
    assert float(x.sum()) == pytest.approx(float(x.clone().sum()))


def test_state_dict_resumes_mid_epoch(learnable):
    root, _, _ = learnable["hdf5"]
    kw = dict(batch_size=16, strategy="global_shuffle", seed=2, as_dict=True, **loader_kwargs("hdf5"))
    reference = [b["sample_ids"] for b in dtorch.Dataset(root, **kw)]
    ds = dtorch.Dataset(root, **kw)
    got = []
    for i, b in enumerate(ds):
        got.append(b["sample_ids"])
        if i == 6:
            break
    sd = ds.state_dict()
    assert sd["epoch"] == 0 and sd["loader_state"] is not None
    fresh = dtorch.Dataset(root, **kw)
    fresh.load_state_dict(sd)
    got.extend(b["sample_ids"] for b in fresh)
    assert torch.equal(torch.cat(got), torch.cat(reference))
    assert fresh.epoch == 1 and fresh.state_dict()["loader_state"] is None


def test_pin_memory_without_cuda_warns_and_yields(learnable):
    root, _, _ = learnable["npz"]
    ds = dtorch.Dataset(root, batch_size=64, pin_memory=True, **loader_kwargs("npz"))
    with pytest.warns(RuntimeWarning, match="pin_memory"):
        batches = list(ds)
    assert len(batches) == 4


DIST_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    import dlfeed.torch
    rank, init, root, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    ds = dlfeed.torch.Dataset(root, fields=["records", "labels"], batch_size=10,
                              strategy="global_shuffle", seed=7, as_dict=True)
    assert (ds.rank, ds.world_size) == (rank, 2)
    ids = torch.cat([b["sample_ids"] for b in ds])
    n = torch.tensor([len(ids)])
    dist.all_reduce(n)  # the group works, and both ranks read the same number
    torch.save(ids, out)
    dist.destroy_process_group()
""")


def test_torch_distributed_two_ranks_read_disjoint_covering_shards(learnable, tmp_path):
    root, _, _ = learnable["hdf5"]
    script = tmp_path / "rank.py"
    script.write_text(DIST_SCRIPT)
    init = f"file://{tmp_path}/pg"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(root), str(tmp_path / f"ids{r}.pt")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
    a, b = (torch.load(tmp_path / f"ids{r}.pt") for r in range(2))
    assert len(a) == len(b) == 128
    assert not set(a.tolist()) & set(b.tolist())
    assert sorted(a.tolist() + b.tolist()) == list(range(256))


def test_dataloader_workers_split_without_duplicates(tmp_path):
    root, _, _ = write_dataset("npz", tmp_path / "d", files=5, per_file=49)  # 245 samples: odd
    ds = dtorch.Dataset(root, batch_size=16, as_dict=True, **loader_kwargs("npz"))
    assert sum(1 for _ in ds) == 16  # this process used dlfeed (threads) before the workers fork
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)  # fork
    ids = []
    for b in dl:
        assert len(b["x"]) == len(b["sample_ids"]) == len(b["y"])
        np.testing.assert_array_equal(b["y"].numpy(), b["sample_ids"].numpy() % 10)
        ids.extend(b["sample_ids"].tolist())
    assert sorted(ids) == list(range(245))
