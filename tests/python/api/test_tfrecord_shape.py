# SPDX-License-Identifier: Apache-2.0
"""TFRecord samples shaped by a companion int64 feature (FormatOptions.shape_feature):
DLIO's `size`, written here by TensorFlow the way DLIO 2.0.0's generator writes
it (an `image` bytes feature of d1 x d2 uint8 and `size` = the nominal side),
read back by dlfeed and compared with numpy's reshape of TensorFlow's bytes."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

import dlfeed
from conftest import dlfeed_binary

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")


def write_dlio_like(path: pathlib.Path, d1: int, d2: int, size: int, n: int, seed: int, compression=None):
    """n records as DLIO's TFRecordGenerator writes them; returns the images."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = []
    with tf.io.TFRecordWriter(str(path), options=compression) as w:
        for _ in range(n):
            img = rng.integers(0, 255, size=(d1, d2), dtype=np.uint8)
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "size": tf.train.Feature(int64_list=tf.train.Int64List(value=[size])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            images.append(img)
    return images


def samples_by_id(loader):
    out = {}
    for batch in loader:
        for i, sid in enumerate(batch.sample_ids):
            out[int(sid)] = np.array(batch[0][i])
    return out


def test_dlio_size_shapes_square_images(tmp_path):
    files = [tmp_path / "data" / "train" / f"img_{i}_of_2.tfrecord" for i in range(2)]
    want = []
    for i, f in enumerate(files):
        want += write_dlio_like(f, 16, 16, 16, 5, seed=i)
    loader = dlfeed.Loader(tmp_path / "data" / "train", fields=["image"], batch_size=4,
                           strategy="global_shuffle", seed=7)
    assert loader.field_specs() == [("image", np.dtype("u1"), (16, 16))]
    got = samples_by_id(loader)
    assert sorted(got) == list(range(10))
    for sid, value in got.items():
        assert value.shape == (16, 16)
        np.testing.assert_array_equal(value, want[sid])


def test_files_of_different_sides_are_ragged_with_each_files_shape(tmp_path):
    train = tmp_path / "d" / "train"
    want = write_dlio_like(train / "img_0_of_2.tfrecord", 8, 8, 8, 3, seed=1)
    want += write_dlio_like(train / "img_1_of_2.tfrecord", 12, 12, 12, 3, seed=2)
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(train, fields=["image"])
    assert "(8, 8)" in str(e.value) and "(12, 12)" in str(e.value) and "ragged" in str(e.value)
    loader = dlfeed.Loader(train, fields=["image"], ragged=True, batch_size=4, strategy="global_shuffle", seed=1)
    got = samples_by_id(loader)
    assert sorted(got) == list(range(6))
    for sid, value in got.items():
        assert value.shape == ((8, 8) if sid < 3 else (12, 12))
        np.testing.assert_array_equal(value, want[sid])


def test_nominal_size_of_drawn_sides_stays_1d_with_a_note(tmp_path):
    # record_length_stdev > 0: DLIO draws 10 x 14 but writes size = 12.
    train = tmp_path / "d" / "train"
    want = write_dlio_like(train / "img_0_of_1.tfrecord", 10, 14, 12, 4, seed=3)
    loader = dlfeed.Loader(train, fields=["image"], batch_size=4)
    assert loader.field_specs()[0][2] == (None,)
    got = samples_by_id(loader)
    for sid, value in got.items():
        np.testing.assert_array_equal(value, want[sid].reshape(-1))
    proc = subprocess.run([dlfeed_binary(), "inspect", str(train)], capture_output=True, text=True, check=True)
    assert "stays 1-D" in proc.stderr and "img_0_of_1.tfrecord" in proc.stderr, proc.stderr
    assert "'size' = [12]" in proc.stderr and "140 elements" in proc.stderr, proc.stderr


def test_a_named_shape_feature_that_does_not_fit_is_an_error(tmp_path):
    f = tmp_path / "mine.tfrecord"
    write_dlio_like(f, 10, 14, 12, 2, seed=4)
    with pytest.raises(dlfeed.Error) as e:
        dlfeed.Loader(f, fields=["image"], shape_feature="size")
    msg = str(e.value)
    assert "mine.tfrecord" in msg and "at offset" in msg and "'size' = [12]" in msg and "140 elements" in msg, msg
    with pytest.raises(dlfeed.NotFoundError) as e:
        dlfeed.Loader(f, fields=["image"], shape_feature="shape")
    assert "mine.tfrecord" in str(e.value) and "no feature 'shape'" in str(e.value)


def test_outside_dlios_places_auto_leaves_bytes_1d_and_a_name_shapes_them(tmp_path):
    f = tmp_path / "mine.tfrecord"
    want = write_dlio_like(f, 6, 6, 6, 3, seed=5)
    assert dlfeed.Loader(f, fields=["image"]).field_specs()[0][2] == (None,)
    assert dlfeed.Loader(tmp_path / "mine.tfrecord", fields=["image"], shape_feature="off").field_specs()[0][2] == (None,)
    loader = dlfeed.Loader(f, fields=["image"], shape_feature="size", batch_size=3)
    assert loader.field_specs()[0][2] == (6, 6)
    got = samples_by_id(loader)
    for sid, value in got.items():
        np.testing.assert_array_equal(value, want[sid])


def test_multi_value_shape_feature_and_a_record_that_disagrees(tmp_path):
    f = tmp_path / "shaped.tfrecord"
    rng = np.random.default_rng(6)
    imgs = [rng.integers(0, 255, size=(2, 3, 4), dtype=np.uint8) for _ in range(3)]
    imgs.append(rng.integers(0, 255, size=(5,), dtype=np.uint8))  # record 3 is not 2 x 3 x 4
    with tf.io.TFRecordWriter(str(f)) as w:
        for img in imgs:
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "dims": tf.train.Feature(int64_list=tf.train.Int64List(value=list(img.shape))),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    loader = dlfeed.Loader(f, fields=["image"], shape_feature="dims", batch_size=3, drop_last_batch=True)
    assert loader.field_specs()[0][2] == (2, 3, 4)
    got = samples_by_id(loader)
    for sid, value in got.items():
        np.testing.assert_array_equal(value, imgs[sid])
    loader = dlfeed.Loader(f, fields=["image"], shape_feature="dims", batch_size=4)
    with pytest.raises(dlfeed.Error) as e:
        list(loader)
    msg = str(e.value)
    assert "shaped.tfrecord" in msg and "record 3" in msg and "(2, 3, 4)" in msg and "5 elements" in msg, msg
    assert "from 'dims' = [2, 3, 4] in record 0" in msg, msg


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_files_are_shaped_too(tmp_path, compression):
    train = tmp_path / "d" / "train"
    want = write_dlio_like(train / "img_0_of_1.tfrecord", 9, 9, 9, 4, seed=8, compression=compression)
    loader = dlfeed.Loader(train, fields=["image"], batch_size=2)
    assert loader.field_specs()[0][2] == (9, 9)
    got = samples_by_id(loader)
    for sid, value in got.items():
        np.testing.assert_array_equal(value, want[sid])


def test_the_index_cache_keeps_the_shape(tmp_path):
    train = tmp_path / "d" / "train"
    want = write_dlio_like(train / "img_0_of_1.tfrecord", 7, 7, 7, 4, seed=9)
    cache = tmp_path / "cache.idx"
    for _ in range(2):  # the second open reads the file's index from the cache
        loader = dlfeed.Loader(train, fields=["image"], batch_size=2, index_cache=str(cache))
        assert loader.field_specs()[0][2] == (7, 7)
        got = samples_by_id(loader)
        for sid, value in got.items():
            np.testing.assert_array_equal(value, want[sid])
    assert cache.exists()
    # Without the shape feature the cache is another one's: 1-D again.
    loader = dlfeed.Loader(train, fields=["image"], shape_feature="off", index_cache=str(cache))
    assert loader.field_specs()[0][2] == (None,)


def write_shaped(path, shapes, seed, compression=None):
    """Records of a bytes feature `image` with its shape in `dims` (as many writers store
    a buffer's shape); the same element count in every record."""
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 255, size=s, dtype=np.uint8) for s in shapes]
    with tf.io.TFRecordWriter(str(path), options=compression) as w:
        for img in imgs:
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "dims": tf.train.Feature(int64_list=tf.train.Int64List(value=list(img.shape))),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return imgs


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_a_record_whose_shape_feature_differs_from_record_0s_is_an_error_not_reshaped(tmp_path, compression):
    """(2, 3), then (3, 2) and (1, 6): as many elements, another shape. Reading record 1 as
    (2, 3) would be a sample silently reshaped."""
    f = tmp_path / "dims.tfrecord"
    write_shaped(f, [(2, 3), (3, 2), (1, 6)], seed=3, compression=compression)

    def read():
        loader = dlfeed.Loader(f, fields=["image"], shape_feature="dims", batch_size=3)
        return samples_by_id(loader)

    with pytest.raises(dlfeed.Error, match=r"(?s)dims\.tfrecord.*record 1 with the shape \(2, 3\) of every record "
                                           r"of the file \(from 'dims' = \[2, 3\] in record 0\).*'dims' = \[3, 2\]"):
        read()
    # Records that all agree read as before, also through the index cache.
    g = tmp_path / "same.tfrecord"
    want = write_shaped(g, [(2, 3)] * 4, seed=4, compression=compression)
    cache = tmp_path / "cache.idx"
    for _ in range(2):
        loader = dlfeed.Loader(g, fields=["image"], shape_feature="dims", batch_size=4, index_cache=str(cache))
        got = samples_by_id(loader)
        assert sorted(got) == [0, 1, 2, 3] and all(np.array_equal(got[i], want[i]) for i in got)


def test_a_feature_of_another_kind_in_another_file_is_an_error(tmp_path):
    """`label` a float_list in one file and a bytes_list in the next: the bytes must not be
    read as the float values the first file's kind gives (within one file this is an error too)."""
    d = tmp_path / "mixed"
    d.mkdir()
    for name, feature in (("f0", tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, 2.5]))),
                          ("f1", tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x01" * 8])))):
        with tf.io.TFRecordWriter(str(d / f"{name}.tfrecord")) as w:
            for _ in range(3):
                w.write(tf.train.Example(features=tf.train.Features(feature={"label": feature})).SerializeToString())
    with pytest.raises(dlfeed.Error, match=r"f1\.tfrecord.*feature 'label' as a float_list \(as in .*f0\.tfrecord\)"
                                           r".*bytes_list"):
        dlfeed.Loader(d, fields=["label"], feature_dtype="float32", batch_size=2)
