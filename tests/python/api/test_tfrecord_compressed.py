# SPDX-License-Identifier: Apache-2.0
"""TFRecord as real datasets have it: GZIP/ZLIB files written by TensorFlow's own
TFRecordWriter, the usual extensions, SequenceExample, variable-length features.
Every sample is compared byte for byte with what TensorFlow reads."""
import os
import pathlib

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")
import dlfeed  # noqa: E402

MIB = 1 << 20


def _example(image: bytes, label: int) -> bytes:
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _image(rng, k: int, size: int) -> bytes:
    if k % 3 == 0:  # noise: deflate stores it
        return rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()
    # compressible, yet distinct per record
    return (bytes([k % 251]) * 7 + rng.integers(0, 4, size=9, dtype=np.uint8).tobytes()) * (size // 16) + b"x" * (size % 16)


def write_tf(path: pathlib.Path, sizes, compression: str, seed: int = 0):
    """TensorFlow writes one Example per size (image of that many bytes, label k);
    returns the images."""
    rng = np.random.default_rng(seed)
    images = []
    with tf.io.TFRecordWriter(str(path), options=tf.io.TFRecordOptions(compression_type=compression)) as w:
        for k, size in enumerate(sizes):
            image = _image(rng, k, size)
            w.write(_example(image, k))
            images.append(image)
    return images


def tf_reads(files, compression: str):
    """Every record's image bytes as TensorFlow reads the files, in order."""
    spec = {"image": tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset([str(f) for f in files], compression_type=compression)
    return [tf.io.parse_single_example(r, spec)["image"].numpy() for r in ds]


# Sizes: many small records between checkpoints, records far larger than the
# 1 MiB checkpoint span (so records span checkpoints), and > 2 checkpoints per file.
BIG = [100, 5, 70_000, 1, 2_500_000, 300, 800_000, 12, 1_300_000, 40_000, 9, 600_000] + [2_000] * 40 + [3 * MIB]


@pytest.fixture(scope="module", params=["GZIP", "ZLIB"])
def compressed(request, tmp_path_factory):
    """A folder of TensorFlow-written compressed files: big (> 2 checkpoints), one
    record, and none (an empty writer), under names that do and do not say so."""
    c = request.param
    root = tmp_path_factory.mktemp(f"tfrecord_{c}")
    ext = ".tfrecord.gz" if c == "GZIP" else ".tfrecords"
    files = [root / f"a_big{ext}", root / f"b_one{ext}", root / f"c_empty{ext}"]
    write_tf(files[0], BIG, c, seed=1)
    write_tf(files[1], [777], c, seed=2)
    write_tf(files[2], [], c)
    return c, root, files


def read_all(loader):
    """{sample id: image bytes} over one epoch, checking each id once."""
    got = {}
    for batch in loader:
        images = batch["image"]
        for i, sid in enumerate(batch.sample_ids):
            assert sid not in got
            got[sid] = np.asarray(images[i]).tobytes()
    return got


@pytest.mark.parametrize("strategy", ["sequential", "global_shuffle"])
def test_compressed_files_read_byte_for_byte_as_tensorflow_reads_them(compressed, strategy):
    c, root, files = compressed
    want = tf_reads(files, c)
    assert len(want) == len(BIG) + 1
    with open(files[0], "rb") as f:
        magic = f.read(2)
    assert magic == (b"\x1f\x8b" if c == "GZIP" else b"\x78\x9c")  # really compressed by TF
    loader = dlfeed.Loader(root, fields=["image"], batch_size=7, strategy=strategy, seed=3)
    assert loader.num_samples == len(want)
    got = read_all(loader)
    assert [got[k] for k in range(len(want))] == want
    if strategy == "global_shuffle":
        order = [sid for b in loader for sid in b.sample_ids]
        assert order != sorted(order)


def test_compressed_shapes_are_exact_at_open(compressed):
    c, root, files = compressed
    loader = dlfeed.Loader(files[0], fields=["image"], batch_size=4)
    # Every record was parsed at open: the lengths are known (and differ).
    (name, dtype, shape), = loader.field_specs()
    assert name == "image" and dtype == np.uint8 and shape == (None,)
    one = dlfeed.Loader(files[1], fields=["image"], batch_size=4)
    assert one.field_specs()[0][2] == (777,)
    labels = dlfeed.Loader(files[0], fields=["label"], batch_size=len(BIG))
    assert labels.field_specs()[0][2] == (1,)
    batch = next(iter(labels))
    assert batch["label"].reshape(-1).tolist() == list(range(len(BIG)))


def test_inspect_reports_compression(dlfeed, compressed):
    c, root, files = compressed
    info = dlfeed.inspect(files[0])
    src = info["sources"][0]
    assert src["layout"] == f"tfrecord:{c.lower()}"
    assert "inflate checkpoints" in src["describe"]
    # Extents are of the compressed file and lie within it.
    size = files[0].stat().st_size
    assert all(off + n <= size for s in info["samples"] for off, n in s["extents"])


def _gzip_file(tmp_path, compression="GZIP"):
    path = tmp_path / ("x.tfrecord.gz" if compression == "GZIP" else "x.tfrecord")
    write_tf(path, [50_000, 3, 200_000, 10], compression)
    return path, path.read_bytes()


def _open_error(path) -> str:
    with pytest.raises(dlfeed.Error) as e:
        dlfeed.Loader(path, fields=["image"], batch_size=2)
    return str(e.value)


@pytest.mark.parametrize("cut", [0.3, 0.7, -8, -3])
def test_truncated_gzip_is_an_error_naming_file_and_offset(tmp_path, cut):
    path, data = _gzip_file(tmp_path)
    n = int(len(data) * cut) if cut > 0 else len(data) + cut
    path.write_bytes(data[:n])
    msg = _open_error(path)
    assert f"{path}: at offset {n}" in msg and "truncated" in msg, msg


def test_a_plain_file_cut_inside_a_first_record_that_looks_compressed_says_both(tmp_path):
    """A plain file whose first record's payload is 376 bytes begins 78 01 00 00, a valid ZLIB header; cut
    inside that record, its length no longer fits the file and it was read as ZLIB, the error only a corrupt
    stream's. It also says what the bytes are as a plain file: a first record cut short."""
    path = tmp_path / "plain.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(3):
            w.write(bytes([k]) * 376)
    data = path.read_bytes()
    assert data[:2] == b"\x78\x01"
    path.write_bytes(data[:200])
    msg = _open_error(path)
    assert str(path) in msg and "ZLIB" in msg, msg
    assert "or a plain TFRecord file cut inside its first record: its first 12 bytes are a valid record header " \
           "whose 376-byte payload passes the end of the 200-byte file" in msg, msg


def test_wrong_gzip_crc_is_an_error(tmp_path):
    path, data = _gzip_file(tmp_path)
    bad = bytearray(data)
    bad[-8] ^= 0x40  # the trailer's CRC-32
    path.write_bytes(bytes(bad))
    msg = _open_error(path)
    assert str(path) in msg and "CRC-32" in msg and "at offset" in msg, msg


def test_wrong_zlib_checksum_is_an_error(tmp_path):
    path, data = _gzip_file(tmp_path, "ZLIB")
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    msg = _open_error(path)
    assert str(path) in msg and "Adler-32" in msg, msg


def test_corrupt_deflate_stream_is_an_error(tmp_path):
    path, data = _gzip_file(tmp_path)
    bad = bytearray(data)
    for i in range(len(data) // 2, len(data) // 2 + 16):
        bad[i] ^= 0xA5
    path.write_bytes(bytes(bad))
    msg = _open_error(path)
    assert str(path) in msg and "at offset" in msg, msg


def test_tensorflow_extensions_are_found_in_folders(tmp_path):
    """.tfrecord, .tfrecords, .tfrec, .tfr, each + .gz; and with format="tfrecord" also
    extensionless shards (train-00000-of-00002); never .idx or text files."""
    names = ["a.tfrecord", "b.tfrecords", "c.tfrec", "d.tfr", "e.tfrec.gz", "f.TFRECORDS.GZ"]
    want = []
    for k, name in enumerate(names):
        want += write_tf(tmp_path / name, [10 + k], "GZIP" if name.lower().endswith(".gz") else "", seed=k)
    (tmp_path / "notes.txt").write_text("not data")
    (tmp_path / "old.idx").write_text("0 40\n")  # a sidecar is not a data file
    loader = dlfeed.Loader(tmp_path, fields=["image"], batch_size=1)
    got = read_all(loader)
    assert [got[k] for k in range(len(want))] == want
    # Extensionless shards, as ImageNet's TFRecords are named: only with an explicit format.
    shards = tmp_path / "shards"
    shards.mkdir()
    shard_want = write_tf(shards / "train-00000-of-00002", [5, 6], "") + write_tf(
        shards / "train-00001-of-00002", [7], "GZIP")
    (shards / "README.md").write_text("about")
    with pytest.raises(dlfeed.Error):
        dlfeed.Loader(shards, fields=["image"], batch_size=1)
    got = read_all(dlfeed.Loader(shards, format="tfrecord", fields=["image"], batch_size=1))
    assert [got[k] for k in range(3)] == shard_want


def test_sequence_example_is_refused(tmp_path):
    path = tmp_path / "seq.tfrecord"
    seq = tf.train.SequenceExample(
        context=tf.train.Features(feature={"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"ctx"]))}),
        feature_lists=tf.train.FeatureLists(feature_list={
            "frames": tf.train.FeatureList(feature=[
                tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2])),
                tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
            ])}))
    with tf.io.TFRecordWriter(str(path)) as w:
        w.write(seq.SerializeToString())
    msg = _open_error(path)
    assert "SequenceExample" in msg and f"{path}: at offset" in msg, msg
    # Compressed too (the record's offset is then in the inflated stream).
    gz = tmp_path / "seq.tfrecord.gz"
    with tf.io.TFRecordWriter(str(gz), options="GZIP") as w:
        w.write(_example(b"fine", 0))
        w.write(seq.SerializeToString())
    msg = _open_error(gz)
    assert "SequenceExample" in msg and f"{gz} (inflated GZIP stream): at offset" in msg, msg
