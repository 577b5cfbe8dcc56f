# SPDX-License-Identifier: Apache-2.0
"""HDF5 files in S3 (a real SeaweedFS server that checks signatures): files written by h5py
in the layouts users and the seed workloads write (contiguous datasets, DeepCAM-style gzip
chunks under a group, a compact dataset that only libhdf5 reads) give from s3://bucket/prefix
the batches they give from a folder, through the Python loader and the command line; a
truncated object or one that is not HDF5 is a clear error naming it."""
import json
import subprocess

import h5py
import numpy as np
import pytest

import dlfeed
from py_datasets import assert_same_epoch, loader_kwargs, shuffled_epoch, write_dataset

BUCKET = "hdf5"

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")


def write_deepcam(root, files=3, per_file=5, seed=2):
    """DeepCAM's layout: climate/data (per sample a gzip chunk of 16x16x4 float32) and
    climate/labels (int32 16x16), as h5py writes them with chunks of one sample."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for f in range(files):
        x = rng.standard_normal((per_file, 16, 16, 4)).astype(np.float32)
        y = rng.integers(0, 3, (per_file, 16, 16)).astype(np.int32)
        with h5py.File(root / f"data-{f:03d}.h5", "w") as h:
            g = h.create_group("climate")
            g.create_dataset("data", data=x, chunks=(1, 16, 16, 4), compression="gzip", shuffle=True)
            g.create_dataset("labels", data=y, chunks=(1, 16, 16), compression="gzip")
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def write_compact(root):
    """One file whose dataset has the compact layout (its bytes inside the object header:
    dlfeed reads it through libhdf5, here through the object driver)."""
    root.mkdir(parents=True, exist_ok=True)
    x = np.arange(12 * 5, dtype=np.int16).reshape(12, 5)
    with h5py.File(root / "compact.h5", "w") as h:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(x.shape)
        ds = h5py.h5d.create(h.id, b"x", h5py.h5t.NATIVE_INT16, space, dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, x)
    return x


@pytest.fixture(scope="module")
def uploaded(s3_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("s3hdf5")
    root, x, y = write_dataset("hdf5", base / "plain", files=3, per_file=40, seed=7)
    dx, dy = write_deepcam(base / "deepcam")
    cx = write_compact(base / "compact")
    out = {"plain": (root, x), "deepcam": (base / "deepcam", dx), "compact": (base / "compact", cx)}
    for name, (folder, _) in out.items():
        s3_server.upload_dir(folder, BUCKET, f"{name}/")
    return {name: (folder, f"s3://{BUCKET}/{name}", x) for name, (folder, x) in out.items()}


@pytest.mark.parametrize("name,kw", [
    ("plain", loader_kwargs("hdf5")),
    ("plain", dict(loader_kwargs("hdf5"), resident="off")),
    ("deepcam", dict(fields=["climate/data", "climate/labels"], resident="off")),
    ("deepcam", dict(fields=["climate/data", "climate/labels"])),
    ("compact", dict(fields=["x"])),
])
def test_s3_hdf5_reads_what_the_folder_holds(s3_server, uploaded, monkeypatch, name, kw):
    s3_server.apply_env(monkeypatch)
    folder, url, x = uploaded[name]
    local = shuffled_epoch(str(folder), 4, 3, **kw)
    before = dlfeed._dlfeed.s3_stats()
    remote = shuffled_epoch(url, 4, 3, **kw)
    after = dlfeed._dlfeed.s3_stats()
    assert_same_epoch(local, remote, x)
    assert after["gets"] > before["gets"] and after["failures"] == before["failures"]


def test_metadata_reads_are_few_requests(s3_server, uploaded, monkeypatch):
    """libhdf5 reads a file's metadata in dozens of small pieces, and each field opens the
    file again; the driver asks the server for whole blocks, kept for the process, so
    indexing three small files for two fields costs one GET each."""
    s3_server.apply_env(monkeypatch)
    folder, _, _ = uploaded["deepcam"]
    s3_server.upload_dir(folder, BUCKET, "deepcam-fresh/")  # objects no earlier test has read
    before = dlfeed._dlfeed.s3_stats()
    loader = dlfeed.Loader(f"s3://{BUCKET}/deepcam-fresh", batch_size=4, fields=["climate/data", "climate/labels"],
                           resident="off")
    after = dlfeed._dlfeed.s3_stats()
    loader.close()
    assert after["gets"] - before["gets"] == 3


def test_cli_run_and_inspect_read_s3_hdf5(dlfeed, s3_server, uploaded, tmp_path):
    folder, url, x = uploaded["deepcam"]
    env = s3_server.env()

    def run(path):
        proc = subprocess.run([dlfeed.binary, "run", "--epochs", "2", "--checksum", "--batch-size", "4",
                               "--fields", "climate/data,climate/labels", "--resident", "off", path],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return [line for line in proc.stdout.splitlines() if line.startswith("checksum:")]

    local, remote = run(str(folder)), run(url)
    assert remote == local and f"over {2 * len(x)} samples" in remote[0]
    proc = subprocess.run([dlfeed.binary, "inspect", "--json", "--name", "climate/data", url + "/data-001.h5"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["num_samples"] == 5 and info["samples"][0]["shape"] == [16, 16, 4]
    assert "hdf5:chunked+shuffle+deflate" in info["sources"][0]["layout"]


def test_truncated_and_foreign_objects_are_clear_errors(s3_server, uploaded, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    whole = (uploaded["plain"][0] / "part_000.hdf5").read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cut.h5").write_bytes(whole[:600])
    (bad / "foreign.h5").write_bytes(b"PK\x03\x04" + bytes(200))
    s3_server.upload_dir(bad, BUCKET, "bad/")
    with pytest.raises(dlfeed.DataError) as e:
        dlfeed.Loader(f"s3://{BUCKET}/bad/foreign.h5", batch_size=2)
    assert e.value.code == "DATA_LOSS"
    assert f"s3://{BUCKET}/bad/foreign.h5" in str(e.value) and "signature" in str(e.value)
    assert "50 4b 03 04" in str(e.value)
    with pytest.raises(dlfeed.Error) as e:
        dlfeed.Loader(f"s3://{BUCKET}/bad/cut.h5", batch_size=2, fields=["records"])
    assert f"s3://{BUCKET}/bad/cut.h5" in str(e.value)


def test_files_an_object_names_are_read_from_the_store_never_from_the_working_directory(s3_server, tmp_path,
                                                                                          monkeypatch):
    # An external link in an object to a sibling object: a local file of that name in the working
    # directory was read instead (-1 everywhere: silently wrong values; found by outside testing).
    s3_server.apply_env(monkeypatch)
    good = np.arange(40 * 5, dtype=np.float32).reshape(40, 5)
    src = tmp_path / "src"
    src.mkdir()
    with h5py.File(src / "ext.h5", "w") as f:
        f.create_dataset("x", data=good)
    with h5py.File(src / "elink.h5", "w") as f:
        f["x"] = h5py.ExternalLink("ext.h5", "/x")
    raw = src / "raw"
    raw.mkdir()
    (raw / "raw.bin").write_bytes(good.tobytes())
    with h5py.File(raw / "ext_raw.h5", "w") as f:
        f.create_dataset("x", shape=good.shape, dtype="<f4", external=[("raw.bin", 0, good.nbytes)])
    s3_server.upload_dir(src, BUCKET, "elink/")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with h5py.File(cwd / "ext.h5", "w") as f:
        f.create_dataset("x", data=-np.ones((40, 5), np.float32))
    (cwd / "raw.bin").write_bytes((-np.ones(good.shape, np.float32)).tobytes())
    monkeypatch.chdir(cwd)

    def read(url):
        loader = dlfeed.Loader(url, fields=["x"], batch_size=100, strategy="sequential")
        return np.concatenate([np.array(b["x"]) for b in loader])

    np.testing.assert_array_equal(read(f"s3://{BUCKET}/elink/elink.h5"), good)
    np.testing.assert_array_equal(read(str(src / "elink.h5")), good)  # the folder's: beside the file
    with pytest.raises(dlfeed.InvalidArgumentError, match=r"ext_raw\.h5: dataset 'x': its external raw-data file "
                                                          r"'raw\.bin' is not read from a store"):
        read(f"s3://{BUCKET}/elink/raw/ext_raw.h5")
