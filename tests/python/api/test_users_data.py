# SPDX-License-Identifier: Apache-2.0
"""Users' own files, written by numpy and h5py rather than by `dlfeed generate`:
never a silent wrong value (mixed dtypes and shapes are refused when the loader
is made), no guessed layout, column files, empty datasets, one error class per
cause."""
import importlib
import os
import subprocess

import h5py
import numpy as np
import pytest

import dlfeed
from conftest import dlfeed_binary


def all_samples(loader, field=0, epoch=None):
    """Every sample of one epoch, keyed by sample id (order-independent)."""
    out = {}
    it = loader if epoch is None else loader.iter_epoch(epoch)
    for batch in it:
        ids = batch.sample_ids
        values = batch[field]
        for i, sid in enumerate(ids):
            out[int(sid)] = np.array(values[i])
    return out


# -- 1. mixed dtypes and shapes ------------------------------------------------


def test_npy_files_of_two_dtypes_are_refused_naming_both(tmp_path):
    np.save(tmp_path / "a.npy", np.array([0.5, 1.5, 2.5, 3.5], dtype=np.float32))
    np.save(tmp_path / "b.npy", np.arange(100, 104, dtype=np.int64))
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path, batch_size=8)
    msg = str(e.value)
    assert "a.npy" in msg and "b.npy" in msg, msg
    assert "<f4" in msg and "<i8" in msg, msg


def test_hdf5_files_of_two_dtypes_are_refused(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["records"] = np.zeros((4, 3), dtype=np.float32)
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f["records"] = np.zeros((4, 3), dtype=np.int64)
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path)
    assert "a.h5" in str(e.value) and "b.h5" in str(e.value) and "int64" in str(e.value)


def test_npz_files_of_two_dtypes_are_refused(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 2), dtype=np.uint8))
    np.savez(tmp_path / "b.npz", x=np.zeros((4, 2), dtype=np.uint16))
    with pytest.raises(dlfeed.InvalidArgumentError, match="a.npz.*b.npz"):
        dlfeed.Loader(tmp_path, fields=["x"])


def test_shapes_that_differ_between_files_need_ragged(tmp_path):
    a = np.arange(4 * 3, dtype=np.int32).reshape(4, 3)
    b = np.arange(4 * 5, dtype=np.int32).reshape(4, 5) + 1000
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path)
    msg = str(e.value)
    assert "(3,)" in msg and "(5,)" in msg and "a.npy" in msg and "b.npy" in msg and "ragged" in msg, msg
    loader = dlfeed.Loader(tmp_path, ragged=True, batch_size=8, strategy="global_shuffle", seed=3)
    assert loader.field_specs() == [("data", np.dtype("<i4"), (None,))]
    got = all_samples(loader)
    want = list(a) + list(b)
    assert sorted(got) == list(range(8))
    for sid, value in got.items():
        np.testing.assert_array_equal(value, want[sid])


def test_mixed_dtypes_are_refused_by_the_cli_too(dlfeed, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(4, dtype=np.float32))
    np.save(tmp_path / "b.npy", np.zeros(4, dtype=np.int64))
    err = dlfeed.error("run", tmp_path)
    assert "a.npy" in err and "b.npy" in err and "<i8" in err, err


# -- 2. the DLIO layout only where it is proven ---------------------------------


def test_a_dlio_like_name_alone_keeps_the_first_axis(tmp_path):
    arr = np.arange(100 * 8, dtype=np.float32).reshape(100, 8)
    np.save(tmp_path / "img_0_of_1.npy", arr)
    loader = dlfeed.Loader(tmp_path / "img_0_of_1.npy", batch_size=10)
    assert loader.num_samples == 100
    got = all_samples(loader)
    for sid in range(100):
        np.testing.assert_array_equal(got[sid], arr[sid])


def test_the_dlio_place_and_name_read_the_last_axis(tmp_path):
    train = tmp_path / "data" / "train"
    train.mkdir(parents=True)
    arr = np.arange(4 * 5 * 6, dtype=np.uint8).reshape(4, 5, 6)  # DLIO: (d1, d2, n)
    np.save(train / "img_0_of_1.npy", arr)
    loader = dlfeed.Loader(train, batch_size=6)
    assert loader.num_samples == 6
    got = all_samples(loader)
    for k in range(6):
        np.testing.assert_array_equal(got[k], arr[..., k])
    # Not zero-padded, as DLIO's releases before the padding wrote it: DLIO's name still.
    os.rename(train / "img_0_of_1.npy", train / "img_0_of_10.npy")
    assert dlfeed.Loader(train, batch_size=6).num_samples == 6
    # Zero-padded to another width than n's: not a name DLIO writes, so not its layout.
    os.rename(train / "img_0_of_10.npy", train / "img_00_of_100.npy")
    assert dlfeed.Loader(train, batch_size=6).num_samples == 4


def test_layout_dlio_and_plain_are_explicit(tmp_path):
    arr = np.arange(3 * 7, dtype=np.int16).reshape(3, 7)
    np.save(tmp_path / "mine.npy", arr)
    loader = dlfeed.Loader(tmp_path, layout="dlio", batch_size=7)
    assert loader.num_samples == 7
    got = all_samples(loader)
    for k in range(7):
        np.testing.assert_array_equal(got[k], arr[:, k])
    train = tmp_path / "train"
    train.mkdir()
    np.save(train / "img_0_of_1.npy", arr)
    assert dlfeed.Loader(train, layout="plain").num_samples == 3
    with pytest.raises(dlfeed.InvalidArgumentError, match="contradicts"):
        dlfeed.Loader(train, layout="dlio", axis="first")
    with pytest.raises(dlfeed.InvalidArgumentError, match="layout"):
        dlfeed.Loader(train, layout="sideways")


def test_inspect_and_run_say_which_axis_was_chosen(dlfeed, tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    np.save(train / "img_0_of_1.npy", np.zeros((4, 4, 3), dtype=np.uint8))
    np.save(tmp_path / "plain.npy", np.zeros((5, 2), dtype=np.uint8))
    assert "last axis (the DLIO layout" in dlfeed.run("inspect", train).stdout
    assert "first axis" in dlfeed.run("inspect", tmp_path / "plain.npy").stdout
    out = dlfeed.run("run", train).stdout
    assert "field data: 3 samples per file along the last axis; [npy]" in out, out
    assert "last axis (the DLIO layout" in out, out
    out = dlfeed.run("run", "--layout", "dlio", tmp_path / "plain.npy").stdout
    assert "dataset: 2 samples" in out, out


# -- 3. column files -------------------------------------------------------------


def assert_columns(loader, x, y):
    """One epoch: sample i is (x[i], y[i]), every sample exactly once."""
    seen = []
    for batch in loader:
        for i, sid in enumerate(batch.sample_ids):
            np.testing.assert_array_equal(batch["x"][i], x[sid])
            assert batch["y"][i] == y[sid]
            seen.append(int(sid))
    assert sorted(seen) == list(range(len(x)))


def test_column_files_are_fields(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((50, 3, 2)).astype(np.float32)
    y = np.arange(50, dtype=np.int64) * 7
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    loader = dlfeed.Loader(tmp_path, fields=["x", "y"], batch_size=8, strategy="global_shuffle", seed=11)
    assert loader.num_samples == 50
    assert loader.field_specs() == [("x", np.dtype("<f4"), (3, 2)), ("y", np.dtype("<i8"), ())]
    assert_columns(loader, x, y)


def test_sharded_column_files_pair_up_by_shard(tmp_path):
    xs = [np.full((n, 2), k, dtype=np.int32) + np.arange(n, dtype=np.int32)[:, None] for k, n in ((0, 5), (100, 3))]
    ys = [np.arange(n, dtype=np.int64) + 1000 * k for k, n in ((0, 5), (1, 3))]
    for k in range(2):
        np.save(tmp_path / f"x_{k:03d}.npy", xs[k])
        np.save(tmp_path / f"y_{k:03d}.npy", ys[k])
    loader = dlfeed.Loader(tmp_path, fields=["x", "y"], batch_size=3, strategy="global_shuffle", seed=2)
    assert_columns(loader, np.concatenate(xs), np.concatenate(ys))


@pytest.mark.parametrize("case", ["a shard missing from one column", "one column zero-padded", "other folders",
                                  "one column with more shards", "upper-case .NPY"])
def test_column_files_that_do_not_pair_by_shard_are_refused(tmp_path, case):
    # Files of equal lengths paired by their place in each column's sorted list would give x of
    # one shard the labels of another: refused, naming the two files and the partner expected.
    def save(name, k):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        with open(tmp_path / name, "wb") as f:  # np.save would add .npy to a name ending .NPY
            np.save(f, np.full((2, 1), k))
    if case == "a shard missing from one column":
        for k in (0, 1, 2):
            save(f"x_{k}.npy", k)
        for k in (0, 2, 3):
            save(f"y_{k}.npy", k)
        bad, expected = "x_1.npy", "y_1.npy"
    elif case == "one column zero-padded":
        for k in (1, 2, 10):
            save(f"x_{k:02d}.npy", k)
            save(f"y_{k}.npy", k)
        bad, expected = "x_01.npy", "y_01.npy"  # tags are compared as written, not as numbers
    elif case == "other folders":
        for name, k in (("a/x.npy", 1), ("a/y.npy", 1), ("b/x.npy", 2), ("c/y.npy", 3)):
            save(name, k)
        bad, expected = "b/x.npy", "b/y.npy"
    elif case == "one column with more shards":
        for k in (0, 1):
            save(f"x_{k}.npy", k)
        save("y_0.npy", 0)
        bad, expected = "x_1.npy", "y_1.npy"
    else:
        for k in (0, 1, 2):
            save(f"x_{k}.NPY", k)
        for k in (1, 2, 3):
            save(f"y_{k}.NPY", k)
        bad, expected = "x_0.NPY", "y_0.NPY"
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path, fields=["x", "y"], batch_size=2, strategy="sequential")
    assert str(tmp_path / bad) in str(e.value) and str(tmp_path / expected) in str(e.value), str(e.value)


def test_column_files_pair_whatever_else_sorts_between_them(tmp_path):
    # data_0.npy < shard1/ < target_0.npy by path: each column is read in order of folder and
    # tag, so the two columns' files line up; a list naming them in other orders reads the same.
    for sub in ("", "shard1"):
        (tmp_path / sub).mkdir(exist_ok=True)
        k = 10 if sub else 0
        np.save(tmp_path / sub / "data_0.npy", np.arange(k, k + 4, dtype=np.int64))
        np.save(tmp_path / sub / "target_0.npy", np.arange(k, k + 4, dtype=np.int64) * 7)
    listed = [tmp_path / "shard1/target_0.npy", tmp_path / "shard1/data_0.npy", tmp_path / "target_0.npy",
              tmp_path / "data_0.npy"]
    for given in (tmp_path, listed):
        got = []
        for b in dlfeed.Loader(given, fields=["data", "target"], batch_size=3, strategy="sequential"):
            assert (b["target"] == b["data"] * 7).all()
            got += b["data"].tolist()
        assert sorted(got) == [0, 1, 2, 3, 10, 11, 12, 13]


def test_column_files_in_several_folders_pair_within_each(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        for k in range(2):
            np.save(tmp_path / sub / f"x_{k}.npy", np.full((3, 1), ord(sub) * 10 + k, dtype=np.int64))
            np.save(tmp_path / sub / f"y_{k}.npy", np.full(3, ord(sub) * 10 + k, dtype=np.int64))
    for b in dlfeed.Loader(tmp_path, fields=["x", "y"], batch_size=4, strategy="global_shuffle", seed=3):
        assert (b["x"][:, 0] == b["y"]).all()


def test_an_unknown_column_is_refused_with_the_columns_there_are(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(4))
    np.save(tmp_path / "y.npy", np.zeros(4))
    with pytest.raises(dlfeed.NotFoundError) as e:
        dlfeed.Loader(tmp_path, fields=["x", "z"])
    assert "'z'" in str(e.value) and "x, y" in str(e.value), str(e.value)


def test_columns_of_different_lengths_are_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(4))
    np.save(tmp_path / "y.npy", np.zeros(5))
    with pytest.raises(dlfeed.InvalidArgumentError, match="same samples per file"):
        dlfeed.Loader(tmp_path, fields=["x", "y"])


def test_columns_of_different_lengths_name_the_first_files_that_differ(tmp_path):
    # The totals agree (9 + 11 rows against 10 + 10) and no file was named: a hunt through every shard.
    for k in range(4):
        np.save(tmp_path / f"x_{k:03d}.npy", np.zeros(({1: 9, 2: 11}.get(k, 10), 2), np.float32))
        np.save(tmp_path / f"y_{k:03d}.npy", np.zeros(10, np.int64))
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path, fields=["x", "y"])
    assert f"in file 2 of 4, {tmp_path / 'y_001.npy'} gives 'y' 10 samples and {tmp_path / 'x_001.npy'} gives 'x' 9" \
        in str(e.value), str(e.value)
    # Two datasets of one HDF5 file: the file named once, with both fields.
    h5py = pytest.importorskip("h5py")
    for k in range(3):
        with h5py.File(tmp_path / f"f{k}.h5", "w") as f:
            f["x"] = np.zeros((10, 2), np.float32)
            f["y"] = np.zeros(9 if k == 2 else 10, np.int64)
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(sorted(tmp_path.glob("*.h5")), fields=["x", "y"])
    assert f"in file 3 of 3, {tmp_path / 'f2.h5'} gives 'y' 9 samples and 'x' 10" in str(e.value), str(e.value)


def test_npy_column_names():
    col = dlfeed._dlfeed.npy_column_of
    assert col("/d/x.npy") == "x"
    assert col("/d/x_000.npy") == "x"
    assert col("/d/x-00001-of-00010.npy") == "x"
    assert col("/d/x_train_3.npy") == "x_train"
    assert col("/d/data_v2.npy") == "data_v2"
    assert col("/d/img_0_of_1.npy") == "img"


# -- 5. a folder with nothing dlfeed reads ---------------------------------------


def test_a_folder_without_data_files_lists_what_it_holds(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "images").mkdir()
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(dlfeed.NotFoundError) as e:
        dlfeed.Loader(tmp_path)
    msg = str(e.value)
    assert "data.csv, images/, notes.txt" in msg, msg


# -- 7. empty datasets --------------------------------------------------------------


def test_an_empty_hdf5_dataset_has_its_real_spec_in_every_api(tmp_path):
    with h5py.File(tmp_path / "e.h5", "w") as f:
        f.create_dataset("records", shape=(0, 8, 8), dtype=np.float32)
    loader = dlfeed.Loader(tmp_path / "e.h5", batch_size=4)
    assert loader.num_samples == 0 and len(loader) == 0
    assert loader.field_specs() == [("data", np.dtype("<f4"), (8, 8))]
    assert list(loader) == []
    tf = pytest.importorskip("tensorflow")
    ds = importlib.import_module("dlfeed.tf").dataset(tmp_path / "e.h5", batch_size=4)
    spec = ds.element_spec
    spec = spec["records"] if isinstance(spec, dict) else spec
    assert spec.dtype == tf.float32 and spec.shape.as_list()[1:] == [8, 8], spec
    assert list(ds) == []
    pytest.importorskip("torch")
    assert list(importlib.import_module("dlfeed.torch").Dataset(tmp_path / "e.h5", batch_size=4)) == []


def test_an_empty_npy_file_has_its_real_spec(tmp_path):
    np.save(tmp_path / "e.npy", np.zeros((0, 3), dtype=np.int16))
    loader = dlfeed.Loader(tmp_path / "e.npy")
    assert loader.field_specs() == [("data", np.dtype("<i2"), (3,))]
    assert list(loader) == []


# -- 8. one error class per cause, messages for Python users ---------------------


def test_a_missing_field_is_not_found_in_every_format(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros(3))
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["records"] = np.zeros(3)
    for path in (tmp_path / "a.npz", tmp_path / "a.h5"):
        with pytest.raises(dlfeed.NotFoundError) as e:
            dlfeed.Loader(path, fields=["nope"])
        assert "'nope'" in str(e.value) and "at offset 0" not in str(e.value), str(e.value)


def test_a_missing_tfrecord_feature_is_not_found(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "a.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for k in range(3):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes([k]) * 4]))}))
            w.write(ex.SerializeToString())
    with pytest.raises(dlfeed.NotFoundError) as e:
        dlfeed.Loader(path, fields=["nope"])
    msg = str(e.value)
    assert "'nope'" in msg and "'image'" in msg and "--" not in msg, msg


def test_an_empty_tfrecord_file_has_the_feature_spec(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "e.tfrecord")
    with tf.io.TFRecordWriter(path):
        pass
    loader = dlfeed.Loader(path, feature_dtype=np.float32, feature_shape=(2, 3))
    assert loader.field_specs() == [("data", np.dtype("<f4"), (2, 3))]
    assert list(loader) == []


def test_unsupported_dtypes_are_invalid_arguments(tmp_path):
    np.save(tmp_path / "s.npy", np.array(["ab", "cd"]))
    with pytest.raises(dlfeed.InvalidArgumentError, match="s.npy"):
        dlfeed.Loader(tmp_path / "s.npy")
    np.save(tmp_path / "c.npy", np.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")]))
    with pytest.raises(dlfeed.InvalidArgumentError, match="structured"):
        dlfeed.Loader(tmp_path / "c.npy")
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["records"] = np.array([b"ab", b"cd"])
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path / "s.h5")
    assert "s.h5" in str(e.value) and "at offset" not in str(e.value), str(e.value)


def test_errors_without_an_offset_do_not_claim_one(tmp_path):
    # A 0-d array is a valid file dlfeed does not read as samples: InvalidArgumentError (docs/formats.md).
    np.save(tmp_path / "scalar.npy", np.float32(3.0))
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path / "scalar.npy")
    assert "scalar.npy: expected an array with at least one dimension" in str(e.value), str(e.value)
    with h5py.File(tmp_path / "scalar.h5", "w") as f:
        f["records"] = np.float32(3.0)
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path / "scalar.h5")
    assert "at offset" not in str(e.value), str(e.value)


def test_python_messages_name_no_cli_flags(tmp_path):
    np.savez(tmp_path / "two.npz", a=np.zeros(3), b=np.zeros(3))
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["a"] = np.zeros(3)
        f["b"] = np.zeros(3)
    for path in (tmp_path / "two.npz", tmp_path / "two.h5"):
        with pytest.raises(dlfeed.NotFoundError) as e:
            dlfeed.Loader(path)
        assert "--" not in str(e.value), str(e.value)
        assert "'a'" in str(e.value) or "a," in str(e.value), str(e.value)


def test_an_hdf5_file_with_one_dataset_needs_no_name(tmp_path):
    arr = np.arange(12, dtype=np.float64).reshape(6, 2)
    with h5py.File(tmp_path / "one.h5", "w") as f:
        f["grp/features"] = arr
    loader = dlfeed.Loader(tmp_path / "one.h5", batch_size=6)
    got = all_samples(loader)
    for k in range(6):
        np.testing.assert_array_equal(got[k], arr[k])


def test_inspect_without_a_name_lists_the_fields(dlfeed, tmp_path):
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["images"] = np.zeros((5, 4, 4), dtype=np.uint8)
        f["labels"] = np.arange(5, dtype=np.int64)
        f["meta/strings"] = np.array([b"a", b"b"])
    out = dlfeed.run("inspect", tmp_path / "two.h5").stdout
    assert "3 fields" in out, out
    assert "images: 5 samples" in out and "labels: 5 samples" in out, out
    assert "meta/strings: not readable" in out, out
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 3)), b=np.ones(2))
    out = dlfeed.run("inspect", tmp_path / "two.npz").stdout
    assert "a: 2 samples" in out and "b: 2 samples" in out, out


def test_a_dlio_data_folder_is_read_as_its_training_split(tmp_path):
    """DLIO's generator leaves DATA/train and DATA/valid: DATA means train/ only, and says so."""
    train, valid = tmp_path / "data" / "train", tmp_path / "data" / "valid"
    train.mkdir(parents=True)
    valid.mkdir()
    x_train = np.arange(4 * 4 * 6, dtype=np.uint8).reshape(4, 4, 6)  # DLIO's layout: samples on the last axis
    np.savez(train / "img_0_of_1.npz", x=x_train, y=np.zeros(6, dtype=np.uint8))
    np.savez(valid / "img_0_of_1.npz", x=x_train[..., :2] + 100, y=np.zeros(2, dtype=np.uint8))
    loader = dlfeed.Loader(tmp_path / "data", fields=["x"], batch_size=6)
    assert loader.num_samples == 6
    got = all_samples(loader)
    for sid, value in got.items():
        np.testing.assert_array_equal(value, x_train[..., sid])
    def inspect(path):
        return subprocess.run([dlfeed_binary(), "inspect", str(path)], capture_output=True, text=True, check=True)
    proc = inspect(tmp_path / "data")
    assert "a DLIO data folder" in proc.stderr and str(valid) in proc.stderr, proc.stderr
    assert "6 samples" in proc.stdout, proc.stdout
    assert "2 samples" in inspect(valid).stdout  # named, valid/ is read
    assert "not read either" not in proc.stderr
    # What else the folder holds is not read either, and the note names it (hidden names aside).
    np.save(tmp_path / "data" / "c.npy", np.zeros((3, 2)))
    (tmp_path / "data" / "test").mkdir()
    (tmp_path / "data" / ".cache").mkdir()
    proc = inspect(tmp_path / "data")
    assert "6 samples" in proc.stdout, proc.stdout
    assert "; not read either: c.npy, test\n" in proc.stderr, proc.stderr
    # A folder without valid/ is itself, with no note.
    assert "DLIO data folder" not in inspect(train).stderr
