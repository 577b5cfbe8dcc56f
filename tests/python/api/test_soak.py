# SPDX-License-Identifier: Apache-2.0
"""Long runs: 1000 epochs over a tiny dataset in one process, with resident
memory at epoch 100 and at epoch 1000 within 2 MiB. Each epoch's pipeline
thread used to leave a 95 KiB counters slab behind (0.1 MiB an epoch, 85 MiB
over these 900 epochs); what an epoch legitimately keeps (its packed counters,
its run report) is a few hundred bytes. Fixtures written by numpy and h5py."""
import gc
import json

import numpy as np
import pytest

import dlfeed
from py_datasets import rss_bytes, write_dataset

EPOCHS = 1000
MEASURED_FROM = 100  # allocator, pools and caches filled by then
LIMIT = 2 << 20


@pytest.mark.parametrize("fmt", ["npz", "hdf5"])
def test_python_loader_memory_flat_over_1000_epochs(tmp_path, fmt):
    root, x, y = write_dataset(fmt, tmp_path / fmt, files=2, per_file=8)
    fields = ["x", "y"] if fmt == "npz" else ["records", "labels"]
    loader = dlfeed.Loader(root, batch_size=4, strategy="global_shuffle", seed=5, fields=fields)
    rss = {}
    for e in range(1, EPOCHS + 1):
        ids = []
        for batch in loader:
            np.testing.assert_array_equal(batch[0], x[batch.sample_ids])
            ids.extend(batch.sample_ids.tolist())
        assert sorted(ids) == list(range(len(x))), e
        if e in (MEASURED_FROM, EPOCHS):
            gc.collect()
            rss[e] = rss_bytes()
    grown = rss[EPOCHS] - rss[MEASURED_FROM]
    assert grown < LIMIT, f"resident memory grew {grown / 2**20:.2f} MiB from epoch {MEASURED_FROM} to {EPOCHS}"
    # Every epoch is still in the counters, each with what it delivered.
    epochs = loader.counters()["epochs"]
    assert [ep["epoch"] for ep in epochs] == list(range(EPOCHS))
    assert all(ep["samples"] == len(x) and ep["complete"] for ep in epochs)
    assert all(ep["latency"]["decode_ns"]["count"] == len(x) // 4 for ep in epochs)


def test_cli_run_memory_flat_over_1000_epochs(dlfeed, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    x = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    np.save(data / "x.npy", x)  # 1 KiB
    summary = tmp_path / "summary.json"
    dlfeed.run("run", "--epochs", EPOCHS, "--batch-size", 8, "--strategy", "global_shuffle", "--quiet",
               "--summary-json", summary, data)
    js = json.loads(summary.read_text())
    run = js["run"]
    assert run["epochs_run"] == EPOCHS
    rss = [ep["rss_bytes"] for ep in run["epochs"]]
    assert len(rss) == EPOCHS and all(r > 0 for r in rss)
    grown = rss[EPOCHS - 1] - rss[MEASURED_FROM - 1]
    assert grown < LIMIT, f"resident memory grew {grown / 2**20:.2f} MiB from epoch {MEASURED_FROM} to {EPOCHS}"
    assert all(ep["samples"] == len(x) and ep["batches"] == 4 for ep in js["epochs"])
