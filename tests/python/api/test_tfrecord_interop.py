# SPDX-License-Identifier: Apache-2.0
"""TFRecord interop with TensorFlow: TF writes, dlfeed reads; dlfeed writes, TF reads."""
import os
import pathlib
import struct

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")


def _example(image: bytes, floats, ints) -> bytes:
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "floats": tf.train.Feature(float_list=tf.train.FloatList(value=floats)),
        "ints": tf.train.Feature(int64_list=tf.train.Int64List(value=ints)),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _tf_fixture(path: pathlib.Path, n: int = 6):
    """Writes n Examples with TensorFlow; returns what each holds."""
    rng = np.random.default_rng(0)
    records = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(n):
            image = rng.integers(0, 256, size=(3 + k, 4), dtype=np.uint8).tobytes()
            floats = [float(k) + 0.25, -1.5, 3.0e10]
            ints = [k, -k, 2**40 + k]
            w.write(_example(image, floats, ints))
            records.append((image, floats, ints))
    return records


def _record_offsets(path: pathlib.Path):
    """(offset, framed length) of every record, walking the framing by hand."""
    data = path.read_bytes()
    out, off = [], 0
    while off < len(data):
        n = int.from_bytes(data[off:off + 8], "little")
        out.append((off, n + 16))
        off += n + 16
    return out


def test_tf_written_file_reads_byte_identically(dlfeed, tmp_path):
    path = tmp_path / "tf.tfrecord"
    records = _tf_fixture(path)
    info = dlfeed.inspect(path)
    assert info["num_samples"] == len(records)
    assert info["files"] == [str(path)]
    assert info["sources"][0]["layout"] == "tfrecord"
    assert "image" in info["sources"][0]["describe"]
    assert [tuple(s["extents"][0]) for s in info["samples"]] == _record_offsets(path)
    assert all(s["dtype"] == "|u1" for s in info["samples"])
    for k, (image, floats, ints) in enumerate(records):
        assert dlfeed.dump_sample(path, k, tmp_path, "--feature", "image") == image
        got = np.frombuffer(dlfeed.dump_sample(path, k, tmp_path, "--feature", "floats"), dtype="<f4")
        np.testing.assert_array_equal(got, np.array(floats, dtype=np.float32))
        got = np.frombuffer(dlfeed.dump_sample(path, k, tmp_path, "--feature", "ints"), dtype="<i8")
        np.testing.assert_array_equal(got, np.array(ints, dtype=np.int64))
    info = dlfeed.inspect(path, "--feature", "floats")
    assert all(s["dtype"] == "<f4" for s in info["samples"])
    info = dlfeed.inspect(path, "--feature", "ints")
    assert all(s["dtype"] == "<i8" for s in info["samples"])


def test_feature_dtype_and_shape(dlfeed, tmp_path):
    path = tmp_path / "f32.tfrecord"
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4) * (k + 1) for k in range(3)]
    with tf.io.TFRecordWriter(str(path)) as w:
        for a in arrays:
            w.write(_example(a.tobytes(), [0.0], [0]))
    info = dlfeed.inspect(path, "--feature-dtype", "float32", "--feature-shape", "3,4")
    assert all(s["shape"] == [3, 4] and s["dtype"] == "<f4" for s in info["samples"])
    got = dlfeed.dump_sample(path, 2, tmp_path, "--feature-dtype", "float32", "--feature-shape", "3,4")
    np.testing.assert_array_equal(np.frombuffer(got, dtype="<f4").reshape(3, 4), arrays[2])
    err = dlfeed.error("inspect", "--feature-dtype", "float32", "--feature-shape", "5,4", path)
    assert str(path) in err and "20 elements" in err


def test_write_index_then_read_it(dlfeed, tmp_path):
    path = tmp_path / "tf.tfrecord"
    _tf_fixture(path)
    idx_dir = tmp_path / "idx"
    info = dlfeed.inspect(path, "--write-index", "--index-dir", idx_dir)
    assert "scan" in info["sources"][0]["describe"]
    lines = (idx_dir / "tf.tfrecord.idx").read_text().splitlines()
    assert [tuple(map(int, l.split())) for l in lines] == _record_offsets(path)
    info = dlfeed.inspect(path, "--index-dir", idx_dir)
    assert "idx sidecar" in info["sources"][0]["describe"]
    assert [tuple(s["extents"][0]) for s in info["samples"]] == _record_offsets(path)


@pytest.mark.parametrize("layout", ["flat", "dlio"])
def test_dlfeed_generated_files_read_by_tensorflow(dlfeed, tmp_path, layout):
    out = tmp_path / "gen"
    args = ["generate", "--format", "tfrecord", "--dir", out, "--files", 2, "--samples-per-file", 8,
            "--shape", "4,5", "--dtype", "uint8"]
    if layout == "dlio":
        args += ["--layout", "dlio"]
    dlfeed.run(*args)
    data_dir = out / "train" if layout == "dlio" else out
    files = sorted(data_dir.glob("*.tfrecord"))
    assert len(files) == 2
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "size": tf.io.FixedLenFeature([], tf.int64)}
    for f in files:
        info = dlfeed.inspect(f)
        assert info["num_samples"] == 8
        tf_records = list(tf.data.TFRecordDataset(str(f)).as_numpy_iterator())  # TF checks the CRCs
        assert len(tf_records) == 8
        for k, raw in enumerate(tf_records):
            ex = tf.io.parse_single_example(raw, spec)
            image = ex["image"].numpy()
            assert len(image) == 20
            assert int(ex["size"].numpy()) == 20
            assert image == dlfeed.dump_sample(f, k, tmp_path)
            full = tf.train.Example.FromString(raw)
            if layout == "dlio":
                assert set(full.features.feature) == {"image", "size"}
            else:
                assert set(full.features.feature) == {"image", "size", "label"}
        if layout == "dlio":
            idx = out / "index" / "train" / (f.name + ".idx")
        else:
            idx = pathlib.Path(str(f) + ".idx")
        assert idx.exists()
        lines = idx.read_text().splitlines()
        assert [tuple(map(int, l.split())) for l in lines] == _record_offsets(f)


def test_corrupt_byte_is_reported_with_file_and_offset(dlfeed, tmp_path):
    path = tmp_path / "bad.tfrecord"
    records = _tf_fixture(path, n=3)
    offsets = _record_offsets(path)
    data = bytearray(path.read_bytes())
    image = records[1][0]
    at = data.index(image, offsets[1][0]) + 2
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    # The scan reads headers only, so inspect succeeds; reading record 1 fails.
    dlfeed.inspect(path)
    err = dlfeed.error("inspect", "--dump-sample", 1, "--out", tmp_path / "x.bin", path)
    footer = offsets[1][0] + offsets[1][1] - 4
    assert str(path) in err
    assert f"at offset {footer}" in err and "payload CRC" in err
    # Without CRC checks the corrupt bytes are returned as they are.
    got = dlfeed.dump_sample(path, 1, tmp_path, "--no-verify-crc")
    assert got[2] == image[2] ^ 0xFF and got[3:] == image[3:]
    # A corrupt length field fails at open.
    data = bytearray(path.read_bytes())
    data[offsets[2][0] + 9] ^= 0x01
    path.write_bytes(bytes(data))
    err = dlfeed.error("inspect", path)
    assert str(path) in err and f"at offset {offsets[2][0] + 8}" in err and "length CRC" in err


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_tfrecord_is_read(dlfeed, tmp_path, compression):
    """Compressed files are read (test_tfrecord_compressed.py has the rest)."""
    path = tmp_path / "c.tfrecord"
    records = []
    with tf.io.TFRecordWriter(str(path), options=compression) as w:
        for k in range(3):
            w.write(_example(bytes([k]) * (5 + k), [1.0], [k]))
            records.append(bytes([k]) * (5 + k))
    info = dlfeed.inspect(path)
    assert info["num_samples"] == 3
    assert info["sources"][0]["layout"] == f"tfrecord:{compression.lower()}"
    for k, image in enumerate(records):
        assert dlfeed.dump_sample(path, k, tmp_path, "--feature", "image") == image


def test_truncated_file_is_reported(dlfeed, tmp_path):
    path = tmp_path / "cut.tfrecord"
    _tf_fixture(path, n=2)
    offsets = _record_offsets(path)
    data = path.read_bytes()
    path.write_bytes(data[:offsets[1][0] + 20])
    err = dlfeed.error("inspect", path)
    assert str(path) in err and f"at offset {offsets[1][0]}" in err and "truncated" in err


def test_a_sidecar_line_of_two_records_names_the_sidecar(tmp_path):
    # Its first and last lines pass the checks at open; the read's error named only the data file.
    import dlfeed
    path = tmp_path / "a.tfrecord"
    _tf_fixture(path, n=8)
    lines = _record_offsets(path)
    merged = lines[:3] + [(lines[3][0], lines[3][1] + lines[4][1])] + lines[5:]
    (tmp_path / "a.tfrecord.idx").write_text("".join(f"{o} {n}\n" for o, n in merged))
    loader = dlfeed.Loader(tmp_path, fields=["ints"], batch_size=1)
    with pytest.raises(dlfeed.DataError) as e:
        list(loader)
    assert f"{path}: at offset {lines[3][0]}" in str(e.value), str(e.value)
    assert f"record 3's extent is line 4 of the idx sidecar {path}.idx" in str(e.value), str(e.value)


def test_records_of_different_sizes_batch_byte_exact_and_the_first_error_wins(tmp_path):
    """Without a shape a record's size is known only once decoded: batches
    whose samples all have the first one's size, batches where some differ,
    and one whose first sample is the odd one all come out byte-exact; of
    two corrupt records in a batch, the error names the earlier one."""
    import dlfeed as dl

    path = tmp_path / "sizes.tfrecord"
    odd = {3, 10, 24, 30}
    images = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(40):
            image = bytes((k * 7 + j) % 256 for j in range(20 if k in odd else 12))
            w.write(_example(image, [float(k)], [k]))
            images.append(image)
    loader = dl.Loader(path, fields=["image", "ints"], batch_size=8, strategy="sequential", ragged=True)
    got = []
    for b in loader:
        ids = [int(i) for i in b.sample_ids]
        arrays = b["image"]
        for i, k in enumerate(ids):
            assert bytes(np.asarray(arrays[i]).tobytes()) == images[k], f"record {k}"
            assert int(np.asarray(b["ints"][i]).reshape(-1)[0]) == k
        got += ids
    assert got == list(range(40))

    offsets = _record_offsets(path)
    data = bytearray(path.read_bytes())
    for k in (13, 11):  # both in batch 1 (records 8-15)
        at = data.index(images[k], offsets[k][0]) + 1
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    footer = offsets[11][0] + offsets[11][1] - 4
    # Two fields of one record share its read and its check (the first field's
    # decode): a corrupt record fails whichever field comes first.
    for fields in (["image"], ["image", "ints"], ["ints", "image"]):
        loader = dl.Loader(path, fields=fields, batch_size=8, strategy="sequential", ragged=True)
        with pytest.raises(Exception) as e:
            for _ in loader:
                pass
        assert str(path) in str(e.value) and f"at offset {footer}" in str(e.value), (fields, str(e.value))


def test_large_tf_written_records_pass_the_crc_check_and_a_flip_fails_it(tmp_path):
    """Records of 1 KiB to 300 KiB written by TensorFlow (its own CRC32C): the
    three-chain hardware path (24 KiB and 768-byte blocks) agrees with it on
    every length, and a byte flipped in the largest record is caught."""
    import dlfeed as dl

    path = tmp_path / "large.tfrecord"
    rng = np.random.default_rng(3)
    sizes = [1000, 767, 768, 769, 24575, 24576, 24577, 73728 + 5, 150528, 300000]
    images = [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes() for n in sizes]
    with tf.io.TFRecordWriter(str(path)) as w:
        for k, image in enumerate(images):
            w.write(_example(image, [float(k)], [k]))
    loader = dl.Loader(path, fields=["image"], batch_size=4, strategy="sequential", ragged=True)
    got = {}
    for b in loader:
        for i, k in enumerate(int(x) for x in b.sample_ids):
            got[k] = np.asarray(b["image"][i]).tobytes()
    assert [got[k] for k in range(len(images))] == images

    offsets = _record_offsets(path)
    data = bytearray(path.read_bytes())
    at = data.index(images[-1][100000:100016], offsets[-1][0])
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(Exception) as e:
        for _ in dl.Loader(path, fields=["image"], batch_size=4, strategy="sequential", ragged=True):
            pass
    footer = offsets[-1][0] + offsets[-1][1] - 4
    assert f"at offset {footer}" in str(e.value) and "payload CRC" in str(e.value), str(e.value)


def _pb_ld(field: int, payload: bytes) -> bytes:
    """A protobuf length-delimited field (field numbers and lengths < 128 here)."""
    assert field < 16 and len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


def _pb_example(key: bytes, feature: bytes, twice: bool = False) -> bytes:
    entry = _pb_ld(1, key) + _pb_ld(2, feature) + (_pb_ld(2, feature) if twice else b"")
    return _pb_ld(1, _pb_ld(1, entry))


@pytest.mark.parametrize("case", ["int64 twice", "float then int64", "value field twice"])
def test_a_feature_with_two_value_lists_is_an_error(tmp_path, case):
    """Records a protobuf writer could make but TensorFlow's never do: protobuf merges the
    lists (or keeps the last kind) and TensorFlow's parser reads otherwise, so dlfeed
    refuses rather than pick one reading."""
    import dlfeed as dl
    tf = pytest.importorskip("tensorflow")
    ints = lambda *v: _pb_ld(3, _pb_ld(1, bytes(v)))  # noqa: E731  (Int64List, packed varints < 128)
    floats = _pb_ld(2, _pb_ld(1, struct.pack("<2f", 1.5, 2.5)))
    record = {"int64 twice": _pb_example(b"x", ints(1, 2) + ints(3)),
              "float then int64": _pb_example(b"x", floats + ints(3)),
              "value field twice": _pb_example(b"x", ints(1, 2), twice=True)}[case]
    path = tmp_path / "crafted.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for _ in range(2):
            w.write(record)
    with pytest.raises(dl.Error, match=r"crafted\.tfrecord.*(one value list in a tf\.train\.Feature|one "
                                       r"tf\.train\.Feature per feature map entry).*a second one"):
        list(dl.Loader(path, fields=["x"], batch_size=2))


def test_a_bytes_feature_of_several_values_is_an_error_naming_the_record(tmp_path):
    """A bytes_list of two values gave its first in silence (the second dropped); TensorFlow's
    FixedLenFeature([], tf.string) refuses such a record. It is an error naming the file, the record and
    the count, in a record after the first (read at the batch) and in the first (read at open)."""
    import dlfeed as dl
    tf = pytest.importorskip("tensorflow")

    def write(path, lists):
        with tf.io.TFRecordWriter(str(path)) as w:
            for vals in lists:
                e = tf.train.Example()
                e.features.feature["image"].bytes_list.value.extend(vals)
                w.write(e.SerializeToString())

    write(tmp_path / "later.tfrecord", [[b"ab"], [b"c", b"dd"], [b"ef"]])
    with pytest.raises(dl.Error, match=r"later\.tfrecord.*one value in bytes_list feature 'image' of record 1 "
                                       r".*found 2 values"):
        list(dl.Loader(tmp_path / "later.tfrecord", fields=["image"], batch_size=3, ragged=True,
                       strategy="sequential"))
    write(tmp_path / "first.tfrecord", [[b"c", b"dd", b"e"], [b"ab"]])
    with pytest.raises(dl.Error, match=r"first\.tfrecord.*of record 0 .*found 3 values"):
        dl.Loader(tmp_path / "first.tfrecord", fields=["image"], batch_size=2, ragged=True)
    write(tmp_path / "one.tfrecord", [[b"ab"], [b"cd"]])
    got = [bytes(np.asarray(b[0])) for b in dl.Loader(tmp_path / "one.tfrecord", fields=["image"], batch_size=2,
                                                      strategy="sequential")]
    assert got == [b"abcd"]


def test_a_feature_with_no_value_list_is_named_as_such(tmp_path):
    # tf.train.Feature() (no list set; TensorFlow's VarLenFeature reads it as []) in one record: the error
    # said feature 'a' was missing, "found only features 'a'".
    import dlfeed as api
    with tf.io.TFRecordWriter(str(tmp_path / "a.tfrecord")) as w:
        for i in range(3):
            f = tf.train.Feature() if i == 1 else tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
            w.write(tf.train.Example(features=tf.train.Features(feature={"a": f})).SerializeToString())
    with pytest.raises(api.NotFoundError, match=r"record 1, found feature 'a' with no value list set"):
        list(api.Loader(tmp_path, fields=["a"], batch_size=3, ragged=True))
