# SPDX-License-Identifier: Apache-2.0
"""TFRecord records read around their value (src/format/split_record.h):
Examples written by TensorFlow as DLIO writes them (an `image` bytes feature,
`size`, and a `label`), whose image bytes are read straight into the batch
and whose CRCs and layout are checked from the pieces. Every batch is compared
with the bytes TensorFlow wrote; corrupt records give the errors a whole read
gives; records whose layout differs from the first record's still read right."""
import os
import pathlib

import numpy as np
import pytest

import dlfeed

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")
from test_tfrecord_interop import _record_offsets  # noqa: E402 (after the TensorFlow check)

SIDE = 272  # 272 x 272 uint8 = 73,984 bytes: over the 64 KiB the route starts at


def _features(img: np.ndarray, label: int):
    return {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
        "size": tf.train.Feature(int64_list=tf.train.Int64List(value=[SIDE])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }


def _example(features) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_files(train: pathlib.Path, files: int = 2, per_file: int = 20, seed: int = 0):
    """DLIO-layout TFRecords written by TensorFlow; returns [(image, label)] by sample id."""
    rng = np.random.default_rng(seed)
    train.mkdir(parents=True, exist_ok=True)
    want = []
    for i in range(files):
        with tf.io.TFRecordWriter(str(train / f"img_{i}_of_{files}.tfrecord")) as w:
            for _ in range(per_file):
                img = rng.integers(0, 256, size=(SIDE, SIDE), dtype=np.uint8)
                label = int(rng.integers(0, 100))
                w.write(_example(_features(img, label)))
                want.append((img, label))
    return want


def read_all(loader, fields):
    got = {}
    for b in loader:
        for i, sid in enumerate(int(x) for x in b.sample_ids):
            got[sid] = tuple(np.array(b[f][i]) for f in fields)
    return got


@pytest.mark.parametrize("fields", [["image", "label"], ["label", "image"], ["image"]])
@pytest.mark.parametrize("verify_crc", [True, False])
def test_tf_written_records_read_around_their_image_are_byte_exact(tmp_path, fields, verify_crc):
    train = tmp_path / "data" / "train"
    want = write_files(train)
    loader = dlfeed.Loader(train, fields=fields, batch_size=8, strategy="global_shuffle", seed=3,
                           verify_crc=verify_crc, resident="off")
    for epoch in range(2):
        got = read_all(loader.iter_epoch(epoch), fields)
        assert sorted(got) == list(range(len(want)))
        for sid, values in got.items():
            img, label = want[sid]
            for f, v in zip(fields, values):
                if f == "image":
                    assert v.shape == (SIDE, SIDE) and v.dtype == np.uint8
                    np.testing.assert_array_equal(v, img)
                else:
                    assert int(v.reshape(-1)[0]) == label
    # Each record took the route (one scattered read: its image into the
    # batch, the bytes around it into the read buffer) and passed its check
    # from the pieces: none was read again whole (with CRCs checked, the
    # image's CRC taken as it was read joined the others').
    s = loader.stats()
    assert s.split_records == 2 * len(want) and s.split_records_whole == 0
    assert s.planned_reads == 2 * len(want)


def test_held_files_take_the_same_route(tmp_path):
    train = tmp_path / "data" / "train"
    want = write_files(train, files=1, per_file=12, seed=5)
    loader = dlfeed.Loader(train, fields=["image", "label"], batch_size=4, strategy="global_shuffle", seed=1)
    got = read_all(loader, ["image", "label"])
    assert sorted(got) == list(range(len(want)))
    for sid, (img, label) in got.items():
        np.testing.assert_array_equal(img, want[sid][0])
        assert int(label.reshape(-1)[0]) == want[sid][1]


@pytest.mark.parametrize("fields", [["image", "label"], ["label", "image"], ["image"]])
@pytest.mark.parametrize("where", ["image", "label"])
@pytest.mark.parametrize("shape_feature", ["auto", "off"])  # shaped by `size`, or 1-D (its layout predicted)
def test_a_flipped_byte_fails_the_payload_crc_at_the_records_footer(tmp_path, fields, where, shape_feature):
    train = tmp_path / "data" / "train"
    want = write_files(train, files=1, per_file=10, seed=1)
    path = train / "img_0_of_1.tfrecord"
    offsets = _record_offsets(path)
    data = bytearray(path.read_bytes())
    k = 6
    if where == "image":
        at = data.index(want[k][0].tobytes()[:64], offsets[k][0]) + 5000
    else:  # the label's varint, after the image
        marker = b"label"
        at = data.index(marker, offsets[k][0]) + len(marker) + 6
        assert at < offsets[k][0] + offsets[k][1] - 4
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    footer = offsets[k][0] + offsets[k][1] - 4
    loader = dlfeed.Loader(train, fields=fields, batch_size=4, strategy="sequential", resident="off",
                           shape_feature=shape_feature)
    with pytest.raises(dlfeed.Error) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert str(path) in msg and f"at offset {footer}" in msg and "payload CRC" in msg, msg
    # CRC checks off: the bytes as they are on disk.
    loader = dlfeed.Loader(train, fields=fields, batch_size=4, strategy="sequential", resident="off",
                           verify_crc=False, shape_feature=shape_feature)
    got = read_all(loader, fields)
    if where == "image" and "image" in fields:
        img = got[k][fields.index("image")]
        assert not np.array_equal(img, want[k][0])
        flat = want[k][0].reshape(-1).copy()
        flat[5000] ^= 0x40
        np.testing.assert_array_equal(img.reshape(-1), flat)


def test_a_corrupt_length_crc_is_reported_at_the_header(tmp_path):
    train = tmp_path / "data" / "train"
    write_files(train, files=1, per_file=6, seed=2)
    path = train / "img_0_of_1.tfrecord"
    offsets = _record_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[3][0] + 9] ^= 0x01  # the length's CRC of record 3
    path.write_bytes(bytes(data))
    # An idx sidecar (offset and length per line): the open then checks only
    # the first and last records' headers, so record 3's is first read by the batch.
    pathlib.Path(str(path) + ".idx").write_text("".join(f"{o} {n}\n" for o, n in offsets))
    loader = dlfeed.Loader(train, fields=["image", "label"], batch_size=2, strategy="sequential",
                           resident="off")
    with pytest.raises(dlfeed.Error) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert str(path) in msg and f"at offset {offsets[3][0] + 8}" in msg and "length CRC" in msg, msg


def _two_part(first: dict, second: dict) -> bytes:
    """One Example as two serialized Examples back to back: protobuf merges
    them (TensorFlow parses it as one), so the order of the parts picks
    where each feature lies without changing the record's length."""
    return _example(first) + _example(second)


def test_records_whose_image_lies_elsewhere_are_read_whole(tmp_path):
    """Records of the first record's length whose image lies elsewhere (the
    label's part first): the prediction misses, the layout check finds it,
    and the record is decoded whole: the right bytes, as TensorFlow reads them."""
    train = tmp_path / "data" / "train"
    train.mkdir(parents=True)
    rng = np.random.default_rng(9)
    want, payloads = [], []
    path = train / "img_0_of_1.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(12):
            img = rng.integers(0, 256, size=(SIDE, SIDE), dtype=np.uint8)
            f = _features(img, 40 + k)
            image_part = {"image": f["image"], "size": f["size"]}
            label_part = {"label": f["label"]}
            payload = _two_part(label_part, image_part) if k % 3 == 2 else _two_part(image_part, label_part)
            w.write(payload)
            want.append((img, 40 + k))
            payloads.append(payload)
    lengths = {n for _, n in _record_offsets(path)}
    assert len(lengths) == 1  # every record as long as the first: each is predicted split
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    for k in (2, 5):  # TensorFlow reads the reordered ones as the same Example
        parsed = tf.io.parse_single_example(payloads[k], spec)
        assert parsed["image"].numpy() == want[k][0].tobytes() and int(parsed["label"]) == want[k][1]
    for fields in (["image", "label"], ["label", "image"]):
        for verify_crc in (True, False):
            for shape_feature in ("auto", "off"):  # (SIDE, SIDE) by `size`, or 1-D: the length predicted too
                loader = dlfeed.Loader(train, fields=fields, batch_size=4, strategy="global_shuffle", seed=2,
                                       resident="off", verify_crc=verify_crc, shape_feature=shape_feature)
                got = read_all(loader, fields)
                assert sorted(got) == list(range(12))
                for sid, values in got.items():
                    by = dict(zip(fields, values))
                    img = want[sid][0] if shape_feature == "auto" else want[sid][0].reshape(-1)
                    np.testing.assert_array_equal(by["image"], img)
                    assert int(by["label"].reshape(-1)[0]) == want[sid][1]
                s = loader.stats()
                assert s.split_records == 12 and s.split_records_whole == 4, (shape_feature, s)


def _write_one_short_image(train: pathlib.Path, short_at: int = 4):
    """6 records of one length; record `short_at`'s image is 16 bytes short,
    padded by another feature. Returns the path and the images written."""
    train.mkdir(parents=True)
    rng = np.random.default_rng(4)
    path = train / "img_0_of_1.tfrecord"
    images = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(6):
            img = rng.integers(0, 256, size=(SIDE, SIDE), dtype=np.uint8)
            f = _features(img, k)
            first = _example({"image": f["image"], "size": f["size"]})
            images.append(img.reshape(-1))
            if k == short_at:
                images[-1] = images[-1][:-16]
                short = tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()[:-16]]))
                first = _example({"image": short, "size": f["size"]})
                plain = len(_example({"label": f["label"]}))
                extra = None
                for m in range(40):  # a padding feature making the second part 16 bytes longer
                    pad = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x" * m]))
                    if len(_example({"label": f["label"], "p": pad})) == plain + 16:
                        extra = {"label": f["label"], "p": pad}
                        break
                assert extra is not None
                w.write(first + _example(extra))
            else:
                w.write(first + _example({"label": f["label"]}))
    offsets = _record_offsets(path)
    assert len({n for _, n in offsets}) == 1, offsets
    return path, images


def test_a_record_whose_image_has_another_size_is_the_usual_error(tmp_path):
    """A record of the first record's length whose image is 16 bytes short
    (padded by another feature): read whole, it gives the error a whole
    read gives, naming the file, the offset and the shape expected."""
    train = tmp_path / "data" / "train"
    path, _ = _write_one_short_image(train)
    loader = dlfeed.Loader(train, fields=["image", "label"], batch_size=2, strategy="sequential", resident="off")
    with pytest.raises(dlfeed.Error) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert str(path) in msg and "record 4" in msg and f"{SIDE * SIDE} elements" in msg, msg
    assert f"{SIDE * SIDE - 16} elements" in msg, msg


@pytest.mark.parametrize("batch_size", [2, 6])
def test_without_a_shape_a_record_whose_image_has_another_size_is_laid_out_again(tmp_path, batch_size):
    """The same file with no shape (1-D images): the batch's images were laid
    out by the first record's length and read into place; record 4's check
    fails, it is decoded whole, its 16-byte-shorter image does not fit, and the
    batch is laid out again: every image as TensorFlow wrote it."""
    train = tmp_path / "data" / "train"
    _, images = _write_one_short_image(train)
    loader = dlfeed.Loader(train, fields=["image", "label"], batch_size=batch_size, strategy="sequential",
                           resident="off", shape_feature="off")
    seen = 0
    for b in loader:
        for i, sid in enumerate(int(x) for x in b.sample_ids):
            np.testing.assert_array_equal(np.array(b["image"][i]), images[sid])
            assert int(np.array(b["label"][i]).reshape(-1)[0]) == sid
            seen += 1
    assert seen == 6
    s = loader.stats()
    assert s.split_records == 6 and s.split_records_whole == 1


@pytest.mark.parametrize("fields", [["image", "label"], ["label", "image"], ["image"]])
@pytest.mark.parametrize("verify_crc", [True, False])
@pytest.mark.parametrize("resident", ["off", "on"])  # read, or held (the engines copy the pieces)
def test_without_a_shape_images_are_read_into_place_by_their_predicted_length(tmp_path, fields, verify_crc,
                                                                               resident):
    """TensorFlow-written records outside DLIO's layout (no shape feature
    read): each image is 1-D, and its length is predicted from the first
    record's, so it is read straight into the batch as a shaped one is."""
    data = tmp_path / "plain"
    want = write_files(data)
    for p in data.iterdir():  # out of DLIO's names: `size` is not read
        p.rename(data / p.name.replace("img_", "part-"))
    loader = dlfeed.Loader(data, fields=fields, batch_size=8, strategy="global_shuffle", seed=3,
                           verify_crc=verify_crc, resident=resident)
    for epoch in range(2):
        got = read_all(loader.iter_epoch(epoch), fields)
        assert sorted(got) == sorted(range(len(want)))
        files = sorted(p.name for p in data.iterdir() if p.suffix == ".tfrecord")
        assert files == ["part-0_of_2.tfrecord", "part-1_of_2.tfrecord"]
        for sid, values in got.items():
            img, label = want[sid]
            for f, v in zip(fields, values):
                if f == "image":
                    assert v.shape == (SIDE * SIDE,) and v.dtype == np.uint8
                    np.testing.assert_array_equal(v, img.reshape(-1))
                else:
                    assert int(v.reshape(-1)[0]) == label
    s = loader.stats()
    assert s.split_records == 2 * len(want) and s.split_records_whole == 0
    if resident == "off":
        assert s.planned_reads == 2 * len(want)


def test_the_index_cache_keeps_the_split_layout(tmp_path):
    train = tmp_path / "data" / "train"
    want = write_files(train, files=1, per_file=8, seed=6)
    cache = tmp_path / "index.cache"
    for _ in range(2):  # written, then read from the cache
        loader = dlfeed.Loader(train, fields=["image", "label"], batch_size=4, strategy="global_shuffle",
                               resident="off", index_cache=str(cache))
        got = read_all(loader, ["image", "label"])
        for sid, (img, label) in got.items():
            np.testing.assert_array_equal(img, want[sid][0])
            assert int(label.reshape(-1)[0]) == want[sid][1]
        assert loader.stats().split_records == len(want) and loader.stats().split_records_whole == 0
    assert (tmp_path / "index.cache.image").exists() and (tmp_path / "index.cache.label").exists()  # one a field
