# SPDX-License-Identifier: Apache-2.0
"""Fields as users name them: each TFRecord field with its own shape and dtype
(as tf.io.parse_example's feature spec gives them), a file pattern that also
names the dataset inside the files (a CDB folder with stats.h5 beside its
data), `dlfeed inspect` showing every field, and option values out of range.
Fixtures are written by TensorFlow and h5py."""
import h5py
import numpy as np
import pytest

import dlfeed as dl  # the module; `dlfeed` is the fixture running the command line
from workload_files import deepcam_file


def write_image_label_records(path, n, seed=0, shape=(3, 8, 8)):
    """ImageNet-style records as TensorFlow writes them: x raw uint8 bytes, y an int64 label."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    labels = rng.integers(0, 1000, size=n, dtype=np.int64)
    with tf.io.TFRecordWriter(str(path)) as w:
        for img, lab in zip(images, labels):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(lab)])),
            }))
            w.write(ex.SerializeToString())
    return images, labels


def by_id(loader):
    out = {}
    for b in loader:
        for k, i in enumerate(b.sample_ids):
            out[int(i)] = (np.array(b[0])[k], np.array(b[1])[k])
    return out


def test_each_tfrecord_field_has_its_own_shape_and_dtype(tmp_path):
    images, labels = write_image_label_records(tmp_path / "a.tfrecord", 40)
    loader = dl.Loader(tmp_path / "a.tfrecord", fields=["x", "y"], shapes={"x": (3, 8, 8), "y": ()},
                       dtypes={"x": np.uint8}, batch_size=16)
    specs = loader.field_specs()
    assert specs[0][1] == np.uint8 and specs[0][2] == (3, 8, 8)
    assert specs[1][1] == np.int64 and specs[1][2] == ()
    got = by_id(loader)
    assert sorted(got) == list(range(40))
    for i, (x, y) in got.items():
        np.testing.assert_array_equal(x, images[i])
        assert y.shape == () and int(y) == labels[i]
    # A shape that does not fit a record is an error naming the file and the feature.
    with pytest.raises(dl.Error, match=r"a\.tfrecord.*'x'"):
        list(dl.Loader(tmp_path / "a.tfrecord", fields=["x", "y"], shapes={"x": (3, 8, 9)}, batch_size=16))
    # A shape or dtype for a name that is not a field.
    with pytest.raises(dl.InvalidArgumentError, match="field_dtypes names 'z', which is not a field"):
        dl.Loader(tmp_path / "a.tfrecord", fields=["x", "y"], dtypes={"z": np.uint8})


def test_images_beside_labels_of_varying_length_are_read_into_the_batch(tmp_path):
    # 3x160x160 images (75 KiB): read straight into the batch. Labels 0..999
    # are varints of 1 or 2 bytes, so records differ in length; TensorFlow
    # writes y before x, so the image is the last bytes of every record.
    images, labels = write_image_label_records(tmp_path / "a.tfrecord", 48, shape=(3, 160, 160))
    assert len({int(v) < 128 for v in labels}) == 2  # both lengths present
    loader = dl.Loader(tmp_path / "a.tfrecord", fields=["x", "y"], shapes={"x": (3, 160, 160), "y": ()},
                       dtypes={"x": np.uint8}, batch_size=16, resident="off")
    got = by_id(loader)
    for i, (x, y) in got.items():
        np.testing.assert_array_equal(x, images[i])
        assert int(y) == labels[i]
    s = loader.stats()
    assert s.split_records == 48 and s.split_records_whole == 0, (s.split_records, s.split_records_whole)


def test_the_cli_takes_a_shape_and_dtype_per_field(dlfeed, tmp_path):
    images, labels = write_image_label_records(tmp_path / "a.tfrecord", 24)
    out = dlfeed.run("run", "--fields", "x,y", "--field-shapes", "x=3,8,8;y=", "--field-dtypes", "x=uint8",
                     "--batch-size", 8, "--checksum", tmp_path / "a.tfrecord").stdout
    assert "feature 'x' (bytes_list as uint8, shape (3, 8, 8))" in out, out
    assert "feature 'y' (int64_list as int64, shape ())" in out, out
    assert "checksum: " in out and "over 24 samples" in out, out
    # Without them both fields are 1-D, and --feature-shape for both cannot fit the label.
    plain = dlfeed.run("run", "--fields", "x,y", "--batch-size", 8, tmp_path / "a.tfrecord").stdout
    assert "shape (3, 8, 8)" not in plain
    err = dlfeed.error("run", "--fields", "x,y", "--feature-shape", "3,8,8", tmp_path / "a.tfrecord")
    assert "'y'" in err, err
    err = dlfeed.error("run", "--fields", "x,y", "--field-shapes", "x3,8,8", tmp_path / "a.tfrecord")
    assert "--field-shapes: 'x3,8,8': expected NAME=DIMS" in err


def test_a_cdb_folder_reads_its_data_files_beside_stats_h5(dlfeed, tmp_path):
    folder = tmp_path / "cdb"
    folder.mkdir()
    arrays = [deepcam_file(folder / f"data-{i:03d}.h5", 4, 6, 3, seed=i) for i in range(5)]
    with h5py.File(folder / "stats.h5", "w") as f:
        f["climate/mean"] = np.zeros(3)
    loader = dl.Loader(folder, axis="none", batch_size=2,
                       fields={"x": "data-*.h5:climate/data", "y": "data-*.h5:climate/labels_0"})
    assert loader.num_samples == 5
    got = by_id(loader)
    for i, (x, y) in got.items():
        np.testing.assert_array_equal(x, arrays[i][0])
        np.testing.assert_array_equal(y, arrays[i][1])
    # The same from the command line, and inspect lists every dataset of the files.
    dlfeed.run("run", "--axis", "none", "--fields", "x=data-*.h5:climate/data,y=data-*.h5:climate/labels_0",
               "--batch-size", 2, folder)
    text = dlfeed.run("inspect", "--axis", "none", folder / "data-000.h5").stdout
    for name in ("climate/data", "climate/labels_0", "climate/data_stats"):
        assert name in text, text
    one = dlfeed.inspect(folder, "--axis", "none", "--fields", "x=data-*.h5:climate/data")
    assert one["fields"]["x"]["num_samples"] == 5


def test_a_pattern_whose_file_names_hold_a_colon(tmp_path):
    # "12:00" is part of the file name, not a member: only a ':' after a data
    # file's extension starts one.
    for h in (0, 6):
        np.save(tmp_path / f"t_{h:02d}_12:00.npy", np.full((3, 2), h, np.float32))
    loader = dl.Loader(tmp_path, fields={"x": "t_*_12:00.npy"}, batch_size=6)
    assert loader.num_samples == 6
    with h5py.File(tmp_path / "d_0.h5", "w") as f:
        f["a/b"] = np.zeros((4, 2), np.float32)
    assert dl.Loader(tmp_path, fields={"x": "d_*.h5:a/b"}, batch_size=4).num_samples == 4


def test_inspect_of_a_folder_with_several_datasets_lists_them(dlfeed, tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    for i in range(3):
        deepcam_file(train / f"data-{i}.h5", 4, 6, 3, seed=i)
    text = dlfeed.run("inspect", "--axis", "none", train).stdout
    assert "fields in" in text and "climate/data:" in text and "climate/labels_0:" in text, text
    both = dlfeed.run("inspect", "--axis", "none", "--fields", "climate/data,climate/labels_0", train).stdout
    assert "field climate/data: 3 files, 3 samples" in both and "field climate/labels_0: 3 files" in both, both


def test_tfrecord_features_are_listed(dlfeed, tmp_path):
    write_image_label_records(tmp_path / "a.tfrecord", 4)
    text = dlfeed.run("inspect", tmp_path / "a.tfrecord").stdout
    assert "2 fields in" in text and "x:" in text and "y:" in text, text


@pytest.mark.parametrize("keyword,value,top", [("seed", -1, 2**64 - 1), ("batch_size", -4, 2**32 - 1)])
def test_an_int_out_of_range_says_the_range(tmp_path, keyword, value, top):
    np.save(tmp_path / "x.npy", np.zeros((8, 2), np.float32))
    with pytest.raises(dl.InvalidArgumentError, match=rf"{keyword}={value}: expected an int from 0 to {top}"):
        dl.Loader(tmp_path / "x.npy", **{keyword: value})


def test_a_dtype_asked_for_a_field_whose_files_give_another_is_an_error(tmp_path):
    """dtypes= sets the element type of raw bytes (TFRecord bytes_list): named for an NPY
    array of float32 it would be passed over, and the user's code would take the float32
    values for what they asked. An error; the dtype the files give is accepted."""
    import dlfeed as dl
    np.save(tmp_path / "x.npy", np.zeros((6, 4), dtype=np.float32))
    np.save(tmp_path / "y.npy", np.arange(6, dtype=np.int64))
    with pytest.raises(dl.InvalidArgumentError, match="field_dtypes gives field 'x' as int32, but its samples are "
                                                      "float32"):
        dl.Loader(str(tmp_path), fields=["x", "y"], dtypes={"x": "int32"}, batch_size=2)
    loader = dl.Loader(str(tmp_path), fields=["x", "y"], dtypes={"x": "float32"}, batch_size=2)
    assert loader.field_specs()[0][1] == np.dtype("float32")


def test_a_view_that_does_not_fit_the_samples_is_refused_when_the_loader_is_made(tmp_path):
    """shapes= views samples whose shape the index knows (NPY, HDF5): a view with another element count, or
    a negative dimension, is an error when the loader is made, naming the field and both shapes, not at
    the first batch after set-up (or in a DataLoader worker); a view that fits reads the values."""
    x = np.arange(6 * 12, dtype=np.float32).reshape(6, 12)
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "x.npy", x)
    np.save(tmp_path / "npy" / "y.npy", np.arange(6, dtype=np.int64))
    with pytest.raises(dl.InvalidArgumentError, match=r"shapes: field 'x': its samples have shape \(12,\) "
                                                      r"\(12 elements\), which cannot be viewed with sample "
                                                      r"shape \(5, 2\) \(10\)"):
        dl.Loader(tmp_path / "npy", fields=["x", "y"], shapes={"x": (5, 2)}, batch_size=2)
    with pytest.raises(dl.InvalidArgumentError, match=r"shapes: field 'x': sample shape \(-1, 3\) has a negative"):
        dl.Loader(tmp_path / "npy", fields=["x", "y"], shapes={"x": (-1, 3)}, batch_size=2)
    (tmp_path / "h5").mkdir()
    with h5py.File(tmp_path / "h5" / "d.h5", "w") as f:
        f["images"] = x
    with pytest.raises(dl.InvalidArgumentError, match=r"field '\w+': its samples have shape \(12,\)"):
        dl.Loader(tmp_path / "h5" / "d.h5", shapes={"images": (13,)}, batch_size=2)
    loader = dl.Loader(tmp_path / "npy", fields=["x", "y"], shapes={"x": (3, 4)}, batch_size=3, strategy="sequential")
    assert loader.field_specs()[0][2] == (3, 4)
    got = np.concatenate([np.array(b["x"]) for b in loader])
    np.testing.assert_array_equal(got, x.reshape(6, 3, 4))
