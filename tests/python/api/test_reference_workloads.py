# SPDX-License-Identifier: Apache-2.0
"""The reference workloads on their own files (issue 26): DeepCAM, CDB and
CosmoFlow as their reference code writes them, written here by h5py, numpy and
TensorFlow, read back by dlfeed with one sample per file (axis="none") and
with fields paired by file-name patterns; every value compared with what
h5py/numpy read. Small shapes for most tests; one test per workload at the
real per-sample shape (2-3 files)."""
import json

import h5py
import numpy as np
import pytest

import dlfeed as dlf  # the module, where a test's `dlfeed` is the command line (conftest)
from workload_files import deepcam_folder, write_cosmoflow_tfrecords

STRATEGIES = ["sequential", "file_shuffle", "local_shuffle", "block_shuffle", "global_shuffle"]


def all_samples(loader, epoch=0):
    """{sample id: tuple of the fields' arrays} over one epoch."""
    out = {}
    for batch in loader.iter_epoch(epoch):
        fields = [np.array(batch[f]) for f in range(len(loader.field_names))]
        for i, sid in enumerate(batch.sample_ids):
            out[int(sid)] = tuple(f[i] for f in fields)
    return out


# -- 1. one sample per file ------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("resident", ["auto", "off"])
def test_deepcam_files_read_whole_with_axis_none(tmp_path, strategy, resident):
    train, arrays = deepcam_folder(tmp_path, 5)
    loader = dlf.Loader(train, axis="none", fields=["climate/data", "climate/labels_0"], batch_size=2,
                           strategy=strategy, seed=3, resident=resident)
    assert loader.num_samples == 5 and loader.batches_per_epoch == 3
    got = all_samples(loader)
    names = sorted(arrays)
    assert sorted(got) == list(range(5))
    for sid, (x, y) in got.items():
        data, labels = arrays[names[sid]]
        assert x.dtype == np.float32 and x.shape == (6, 8, 16)
        np.testing.assert_array_equal(x, data)
        np.testing.assert_array_equal(y, labels)


def test_axis_none_resumes_and_shards_by_file(tmp_path):
    train, arrays = deepcam_folder(tmp_path, 7)
    opts = dict(axis="none", fields=["climate/data"], batch_size=1, strategy="global_shuffle", seed=11)
    whole = [int(b.sample_ids[0]) for b in dlf.Loader(train, **opts).iter_epoch(0)]
    assert sorted(whole) == list(range(7))
    a = dlf.Loader(train, **opts)
    it = a.iter_epoch(0)
    first = [int(next(it).sample_ids[0]) for _ in range(3)]
    state = a.state()
    b = dlf.Loader(train, **opts)
    b.restore(state)
    rest = [int(x.sample_ids[0]) for x in b.iter_epoch(0)]
    assert first + rest == whole
    # Two ranks: together every file, each rank 4 (one file padded in, as shards are by default).
    seen = []
    for rank in range(2):
        r = dlf.Loader(train, rank=rank, world_size=2, **opts)
        for batch in r.iter_epoch(0):
            sid = int(batch.sample_ids[0])
            np.testing.assert_array_equal(np.array(batch[0])[0], arrays[sorted(arrays)[sid]][0])
            seen.append(sid)
    assert set(seen) == set(range(7)) and len(seen) == 8


def test_deepcam_without_axis_none_keeps_axis_0_and_says_so(dlfeed, tmp_path):
    train, _ = deepcam_folder(tmp_path, 3)
    # Today's rule stays (axis 0: 6 rows per file), but the header shows it at a glance.
    out = dlfeed.run("run", "--fields", "climate/data", "--batch-size", 2, "--compute-ms", 0, train).stdout
    assert "field climate/data: 6 samples per file along axis 0" in out, out
    out = dlfeed.run("run", "--axis", "none", "--fields", "climate/data,climate/labels_0", "--batch-size", 2,
                     "--compute-ms", 0, train).stdout
    assert "field climate/data: 1 sample per file (axis none)" in out, out
    assert "field climate/labels_0: 1 sample per file (axis none)" in out, out
    assert "dataset: 3 samples in 3 files" in out
    info = dlfeed.inspect(train, "--axis", "none", "--name", "climate/data")
    assert info["samples_per_file"] == "1 sample per file (axis none)"
    assert info["samples"][0]["shape"] == [6, 8, 16]
    text = dlfeed.run("inspect", "--name", "climate/data", train).stdout
    assert "3 files, 18 samples: 6 samples per file along axis 0" in text, text


def test_deepcam_sample_dumped_is_the_h5py_array(dlfeed, tmp_path):
    train, arrays = deepcam_folder(tmp_path, 2)
    raw = dlfeed.dump_sample(train, 1, tmp_path, "--axis", "none", "--name", "climate/data")
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(6, 8, 16), arrays[sorted(arrays)[1]][0])


def test_chunked_and_compressed_hdf5_datasets_read_whole(tmp_path):
    data = np.arange(2 * 10 * 12, dtype=np.float32).reshape(10, 12, 2)
    for i, kw in enumerate([dict(chunks=(4, 5, 2)), dict(chunks=(3, 12, 2), compression="gzip", shuffle=True)]):
        with h5py.File(tmp_path / f"s{i}.h5", "w") as f:
            f.create_dataset("climate/data", data=data + i, **kw)
    got = all_samples(dlf.Loader(tmp_path, axis="none", fields=["climate/data"], batch_size=2))
    for i in range(2):
        np.testing.assert_array_equal(got[i][0], data + i)


def test_cdb_files_channels_first_with_int_labels(tmp_path):
    # NERSC's climate benchmark: climate/data (16, H, W) float32, climate/labels (H, W) int32.
    rng = np.random.default_rng(5)
    arrays = []
    for i in range(3):
        x = rng.standard_normal((16, 6, 10)).astype(np.float32)
        y = rng.integers(0, 3, (6, 10)).astype(np.int32)
        with h5py.File(tmp_path / f"data_{i:04d}.h5", "w") as f:
            f["climate/data"] = x
            f["climate/labels"] = y
        arrays.append((x, y))
    with pytest.raises(dlf.InvalidArgumentError) as e:  # axis 0 cannot pair 16 channels with 6 rows
        dlf.Loader(tmp_path, fields=["climate/data", "climate/labels"], batch_size=2)
    assert "axis none" in str(e.value) and "16 samples per file along axis 0" in str(e.value), str(e.value)
    loader = dlf.Loader(tmp_path, axis="none", fields=["climate/data", "climate/labels"], batch_size=2)
    for sid, (x, y) in all_samples(loader).items():
        np.testing.assert_array_equal(x, arrays[sid][0])
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, arrays[sid][1])


def test_npz_members_and_fortran_npy_read_whole(tmp_path):
    a = np.asfortranarray(np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    np.save(tmp_path / "f.npy", a)
    got = all_samples(dlf.Loader(tmp_path / "f.npy", axis="none", batch_size=1))
    assert got[0][0].shape == (2, 3, 4)
    np.testing.assert_array_equal(got[0][0], a)
    z = tmp_path / "z"
    z.mkdir()
    for i in range(3):
        np.savez(z / f"s{i}.npz", x=np.full((4, 5), i, np.float64), y=np.array([i, i + 1]))
    got = all_samples(dlf.Loader(z, axis="none", fields=["x", "y"], batch_size=3))
    for i in range(3):
        np.testing.assert_array_equal(got[i][0], np.full((4, 5), i, np.float64))
        np.testing.assert_array_equal(got[i][1], [i, i + 1])


def test_index_cache_keeps_axis_none(tmp_path):
    train, arrays = deepcam_folder(tmp_path, 3)
    cache = tmp_path / "index.cache"
    for _ in range(2):  # written, then read from the cache
        got = all_samples(dlf.Loader(train, axis="none", fields=["climate/data"], batch_size=3,
                                        index_cache=cache))
        for sid, (x,) in got.items():
            np.testing.assert_array_equal(x, arrays[sorted(arrays)[sid]][0])
    assert cache.exists()


# -- 2. fields from file-name patterns ------------------------------------------


def cosmoflow_npy_pairs(folder, n, shape=(4, 4, 4, 4)):
    """NVIDIA's CosmoFlow conversion: NAME_data.npy int16 and NAME_label.npy float32 (4,)."""
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = {}
    for i in range(n):
        name = f"univ_{i:03d}"
        x = rng.integers(0, 50, shape).astype(np.int16)
        y = rng.standard_normal(4).astype(np.float32)
        np.save(folder / f"{name}_data.npy", x)
        np.save(folder / f"{name}_label.npy", y)
        pairs[name] = (x, y)
    return pairs


@pytest.mark.parametrize("strategy", ["sequential", "global_shuffle"])
def test_cosmoflow_npy_pairs_by_pattern(tmp_path, strategy):
    pairs = cosmoflow_npy_pairs(tmp_path / "train", 5)
    # a name that sorts differently with each suffix: univ_001 vs univ_0010 ...
    extra = np.full((4, 4, 4, 4), 7, np.int16)
    np.save(tmp_path / "train" / "univ_0010_data.npy", extra)
    np.save(tmp_path / "train" / "univ_0010_label.npy", np.full(4, 7, np.float32))
    pairs["univ_0010"] = (extra, np.full(4, 7, np.float32))
    loader = dlf.Loader(tmp_path / "train", fields={"x": "*_data.npy", "y": "*_label.npy"}, axis="none",
                           batch_size=2, strategy=strategy)
    assert loader.field_names == ["x", "y"]
    by_x = {tuple(x.ravel()[:8]): (x, y) for x, y in pairs.values()}
    got = all_samples(loader)
    assert len(got) == 6
    for x, y in got.values():
        assert x.dtype == np.int16 and x.shape == (4, 4, 4, 4) and y.shape == (4,)
        want = by_x[tuple(x.ravel()[:8])]
        np.testing.assert_array_equal(x, want[0])
        np.testing.assert_array_equal(y, want[1])


def test_deepcam_npy_pairs_by_pattern(dlfeed, tmp_path):
    rng = np.random.default_rng(2)
    want = {}
    for i in range(3):
        stamp = f"2106-01-01-{i * 3:02d}-1"
        x = rng.standard_normal((6, 8, 16)).astype(np.float32)
        y = rng.integers(0, 3, (6, 8)).astype(np.float32)
        np.save(tmp_path / f"data-{stamp}.npy", x)
        np.save(tmp_path / f"label-{stamp}.npy", y)
        want[i] = (x, y)
    loader = dlf.Loader(tmp_path, fields={"data": "data-*.npy", "label": "label-*.npy"}, axis="none",
                           batch_size=3)
    for sid, (x, y) in all_samples(loader).items():
        np.testing.assert_array_equal(x, want[sid][0])
        np.testing.assert_array_equal(y, want[sid][1])
    out = dlfeed.run("run", "--fields", "data=data-*.npy,label=label-*.npy", "--axis", "none", "--batch-size", 3,
                     "--compute-ms", 0, "--checksum", tmp_path).stdout
    assert "field data: 1 sample per file (axis none)" in out and "3 samples in 3 files" in out, out


def test_a_file_without_its_partner_is_named(dlfeed, tmp_path):
    cosmoflow_npy_pairs(tmp_path, 3)
    (tmp_path / "univ_001_label.npy").unlink()
    with pytest.raises(dlf.InvalidArgumentError) as e:
        dlf.Loader(tmp_path, fields={"x": "*_data.npy", "y": "*_label.npy"}, axis="none")
    msg = str(e.value)
    assert "univ_001_data.npy" in msg and "no partner" in msg and "univ_001_label.npy" in msg, msg
    err = dlfeed.error("run", "--fields", "x=*_data.npy,y=*_label.npy", "--axis", "none", tmp_path)
    assert "univ_001_data.npy" in err and "no partner" in err, err


def test_a_pattern_matching_nothing_lists_what_is_there(tmp_path):
    cosmoflow_npy_pairs(tmp_path, 2)
    with pytest.raises(dlf.NotFoundError) as e:
        dlf.Loader(tmp_path, fields={"x": "*_data.npy", "y": "*_labels.npy"}, axis="none")
    msg = str(e.value)
    assert "*_labels.npy" in msg and "univ_000_label.npy" in msg, msg
    with pytest.raises(dlf.InvalidArgumentError):
        dlf.Loader(tmp_path, fields={"x": "data.npy"})  # no '*' to pair by


def test_pairs_without_axis_none_say_why_they_disagree(tmp_path):
    cosmoflow_npy_pairs(tmp_path, 2, shape=(2, 4, 4, 4))
    with pytest.raises(dlf.InvalidArgumentError) as e:
        dlf.Loader(tmp_path, fields={"x": "*_data.npy", "y": "*_label.npy"})
    msg = str(e.value)
    assert "2 samples per file along axis 0" in msg and "4 samples per file along axis 0" in msg, msg
    assert "axis none" in msg


# -- real per-sample shapes (2-3 files each) ----------------------------------------


def test_deepcam_at_the_real_shape(tmp_path):
    train, arrays = deepcam_folder(tmp_path, 2, h=768, w=1152, c=16)
    loader = dlf.Loader(train, axis="none", fields=["climate/data", "climate/labels_0"], batch_size=2)
    (batch,) = list(loader.iter_epoch(0))
    for k, name in enumerate(sorted(arrays)):
        sid = int(batch.sample_ids[k])
        assert sid == k
        np.testing.assert_array_equal(np.array(batch[0])[k], arrays[name][0])
        np.testing.assert_array_equal(np.array(batch[1])[k], arrays[name][1])


def test_cosmoflow_npy_pairs_at_the_real_shape(tmp_path):
    pairs = cosmoflow_npy_pairs(tmp_path, 2, shape=(128, 128, 128, 4))
    loader = dlf.Loader(tmp_path, fields={"x": "*_data.npy", "y": "*_label.npy"}, axis="none", batch_size=2)
    (batch,) = list(loader.iter_epoch(0))
    for k, name in enumerate(sorted(pairs)):
        np.testing.assert_array_equal(np.array(batch[0])[k], pairs[name][0])
        np.testing.assert_array_equal(np.array(batch[1])[k], pairs[name][1])


def test_cosmoflow_tfrecords_at_the_real_shape(tmp_path):
    want = write_cosmoflow_tfrecords(tmp_path / "train", 2, (128, 128, 128, 4))
    loader = dlf.Loader(tmp_path / "train", fields=["x", "y"], feature_dtype="int16",
                           shapes={"x": (128, 128, 128, 4)}, batch_size=2)
    (batch,) = list(loader.iter_epoch(0))
    for k in range(2):
        np.testing.assert_array_equal(np.array(batch[0])[k], want[k][0])
        np.testing.assert_array_equal(np.array(batch[1])[k], want[k][1])


# -- 4. presets writing and reading the reference layouts --------------------------


def test_deepcam_preset_writes_deepcams_files(dlfeed, tmp_path):
    d = tmp_path / "dc"
    out = tmp_path / "s.json"
    proc = dlfeed.run("run", "--workload", "deepcam", "--scale", 1e-6, "--data-dir", d, "--compute-ms", 0,
                      "--summary-json", out)
    files = sorted((d / "train").glob("*.h5"))
    assert len(files) == 16 and all(f.name.startswith("data-2106-01-") for f in files), files
    xs = []
    for f in files:
        with h5py.File(f) as h:
            assert set(h["climate"]) == {"data", "data_stats", "labels_0", "labels_0_stats", "labels_1",
                                         "labels_1_stats"}
            x = h["climate/data"][...]
            assert x.shape == (67, 100, 16) and x.dtype == np.float32
            assert h["climate/labels_0"].shape == (67, 100) and h["climate/labels_0"].dtype == np.float32
            assert set(np.unique(h["climate/labels_0"][...])) <= {0.0, 1.0, 2.0}
            assert h["climate/data_stats"].shape == (4, 16) and h["climate/labels_0_stats"].shape == (7, 1)
            assert h["climate/data"].chunks is None and h["climate/data"].compression is None
            xs.append(x)
    allx = np.stack(xs).astype(np.float64)
    with h5py.File(d / "stats.h5") as s:
        np.testing.assert_allclose(s["climate/minval"][...], allx.min((0, 1, 2)))
        np.testing.assert_allclose(s["climate/maxval"][...], allx.max((0, 1, 2)))
        np.testing.assert_allclose(s["climate/mean"][...], allx.mean((0, 1, 2)), rtol=1e-9)
        assert set(s["climate"]) == {"count", "mean", "sqmean", "minval", "maxval"}
    assert "field climate/data: 1 sample per file (axis none)" in proc.stdout, proc.stdout
    summary = json.loads(out.read_text())
    assert summary["epochs"][0]["samples"] == 16
    manifest = json.loads((d / "dlfeed-workload.json").read_text())
    assert manifest["layout"] == "deepcam"
    # The preset's own folder proves its layout (the marker): read one sample per file without --axis.
    again = dlfeed.run("run", "--fields", "climate/data,climate/labels_0", "--compute-ms", 0, d / "train").stdout
    assert "written by the deepcam preset" in again and "dataset: 16 samples in 16 files" in again, again
    # A copy of the files without the marker is a user's folder: axis 0 stays, and the header says so.
    (d / "dlfeed-workload.json").rename(d / "marker.json")
    plain = dlfeed.run("run", "--fields", "climate/data,climate/labels_0", "--compute-ms", 0, d / "train").stdout
    assert "67 samples per file along axis 0" in plain, plain


def test_deepcam_preset_runs_on_a_users_folder(dlfeed, tmp_path):
    deepcam_folder(tmp_path / "mine", 4, h=6, w=8)
    proc = dlfeed.run("run", "--workload", "deepcam", "--data-dir", tmp_path / "mine", "--compute-ms", 0,
                      "--evict=false", "--checksum")
    assert "deepcam's own files" in proc.stdout, proc.stdout
    assert "dataset: 4 samples in 4 files" in proc.stdout, proc.stdout
    assert "field climate/data: 1 sample per file (axis none)" in proc.stdout


def test_cosmoflow_preset_writes_mlperf_tfrecords(dlfeed, tmp_path):
    import tensorflow as tf  # noqa: PLC0415
    d = tmp_path / "cf"
    proc = dlfeed.run("run", "--workload", "cosmoflow", "--scale", 1e-6, "--data-dir", d, "--compute-ms", 0)
    files = sorted((d / "train").glob("*.tfrecord"))
    assert len(files) >= 8
    shape = None
    for f in files[:3]:
        assert f.read_bytes()[:2] == b"\x1f\x8b"  # GZIP
        (rec,) = list(tf.data.TFRecordDataset(str(f), compression_type="GZIP"))
        ex = tf.io.parse_single_example(rec, {"x": tf.io.FixedLenFeature([], tf.string),
                                              "y": tf.io.FixedLenFeature([4], tf.float32)})
        x = tf.io.decode_raw(ex["x"], tf.int16).numpy()
        assert x.min() >= 0 and ex["y"].shape == (4,)
        shape = x.size
    manifest = json.loads((d / "dlfeed-workload.json").read_text())
    assert manifest["layout"] == "cosmoflow" and np.prod(manifest["sample_shape"]) == shape
    assert manifest["sample_shape"][2:] == [128, 4] and manifest["dtype"] == "int16"
    assert "1 sample per file (one per record)" in proc.stdout, proc.stdout


def test_cosmoflow_preset_runs_on_a_users_folder(dlfeed, tmp_path):
    write_cosmoflow_tfrecords(tmp_path / "mine" / "train", 2, (128, 128, 128, 4))
    proc = dlfeed.run("run", "--workload", "cosmoflow", "--data-dir", tmp_path / "mine", "--compute-ms", 0,
                      "--evict=false")
    assert "cosmoflow's own files" in proc.stdout and "dataset: 2 samples in 2 files" in proc.stdout, proc.stdout
    assert "(128, 128, 128, 4)" in proc.stdout
