# SPDX-License-Identifier: Apache-2.0
"""Two small Python behaviours: Loader.write_trace() without trace=True is an
error that says to enable it (not an empty trace file), and
dlfeed.tf.dataset(loader=L) takes an existing loader with no paths."""
import gzip
import json

import numpy as np
import pytest

import dlfeed


@pytest.fixture(scope="module")
def npy_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    rng = np.random.default_rng(3)
    for i in range(3):
        np.save(d / f"part_{i}.npy", rng.random((20, 4, 4), dtype=np.float32))
    return d


def test_write_trace_without_tracing_says_to_enable_it(npy_dir, tmp_path):
    loader = dlfeed.Loader(npy_dir, batch_size=8)
    for _ in loader:
        pass
    path = tmp_path / "t.json"
    with pytest.raises(ValueError) as err:
        loader.write_trace(path)
    assert "trace=True" in str(err.value) and str(path) in str(err.value)
    assert err.value.code == "FAILED_PRECONDITION"
    assert not path.exists()


def test_write_trace_with_tracing_and_a_gz_path(npy_dir, tmp_path):
    loader = dlfeed.Loader(npy_dir, batch_size=8, trace=True)
    batches = sum(1 for _ in loader)
    loader.write_trace(tmp_path / "t.json.gz")
    doc = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
    assert sum(1 for e in doc["traceEvents"] if e.get("name") == "decode") == batches == 8
    loader.write_trace(tmp_path / "t.pfw.gz", format="dftracer")
    lines = gzip.decompress((tmp_path / "t.pfw.gz").read_bytes()).decode().splitlines()
    items = [json.loads(ln) for ln in lines[1:-1]]
    assert sum(1 for e in items if (e["cat"], e["name"]) == ("data", "item")) == batches


def test_tf_dataset_takes_a_loader_without_paths(npy_dir):
    tf = pytest.importorskip("tensorflow")
    import dlfeed.tf as dtf

    want = np.concatenate([np.load(npy_dir / f"part_{i}.npy") for i in range(3)])
    loader = dlfeed.Loader(npy_dir, batch_size=16, strategy="sequential")
    ds = dtf.dataset(loader=loader)
    got = np.concatenate([el.numpy() for el in ds])
    np.testing.assert_array_equal(got, want)
    assert isinstance(ds, tf.data.Dataset)
    ds2 = dtf.dataset(None, loader=dlfeed.Loader(npy_dir, batch_size=16))  # the spelling that worked before
    assert sum(el.shape[0] for el in ds2) == 60


def test_tf_dataset_refuses_paths_and_loader_together_or_neither(npy_dir):
    pytest.importorskip("tensorflow")
    import dlfeed.tf as dtf

    loader = dlfeed.Loader(npy_dir, batch_size=16)
    assert sum(el.shape[0] for el in dtf.dataset(npy_dir, loader=loader)) == 60  # its own paths: the old spelling
    with pytest.raises(TypeError, match="paths or loader="):
        dtf.dataset(str(npy_dir) + "/elsewhere", loader=loader)
    with pytest.raises(TypeError, match="paths, or loader="):
        dtf.dataset()
    with pytest.raises(TypeError, match="not both"):
        dtf.dataset(loader=loader, batch_size=4)
