# SPDX-License-Identifier: Apache-2.0
"""The header tier (dlfeed::headers) on its own: tests/headers_consumer is
built against it with no libdlfeed on its link line. Its orders must equal
`dlfeed order`'s (libdlfeed's registry) for every strategy, it must read
NPY, NPZ, TFRecord and tf.train.Example data as numpy and TensorFlow wrote it,
and merge counters snapshots as numpy computes the job's figures."""
import os
import pathlib
import subprocess
import zipfile
import zlib

import numpy as np
import pytest

from conftest import ROOT, dlfeed_binary


def consumer() -> pathlib.Path:
    default = pathlib.Path(dlfeed_binary()).resolve().parents[1] / "tests" / "headers_consumer" / "headers_consumer"
    path = pathlib.Path(os.environ.get("DLFEED_HEADERS_CONSUMER", default))
    if not path.exists():
        pytest.fail(f"{path} not built (cmake --build build --target headers_consumer)")
    return path


def run(*args, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(consumer()), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"headers_consumer {args}: {proc.returncode}\n{proc.stderr}"
    return proc


def test_no_libdlfeed_on_the_link_line():
    needed = subprocess.run(["readelf", "-d", str(consumer())], capture_output=True, text=True, check=True).stdout
    assert "libdlfeed" not in needed, needed
    # Nothing of dlfeed is left for a library to provide: every dlfeed symbol is defined in the program.
    undefined = subprocess.run(["nm", "-C", "--undefined-only", str(consumer())], capture_output=True, text=True,
                               check=True).stdout
    assert "dlfeed::" not in undefined, [line for line in undefined.splitlines() if "dlfeed::" in line]


STRATEGIES = ["sequential", "file_shuffle", "local_shuffle", "buffered_shuffle", "block_shuffle",
              "global_shuffle", "global_feistel"]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("world,drop_last", [(1, 0), (3, 0), (3, 1)])
def test_every_strategy_equals_dlfeed_order(dlfeed, strategy, world, drop_last):
    files, per, seed, epoch = 7, 13, 1234, 2
    buffer_size, block_size, window = 10, 4, 3
    for rank in range(world):
        ours = run("order", files, per, strategy, seed, epoch, rank, world, drop_last, buffer_size, block_size,
                   window).stdout.split()
        args = ["order", "--files", files, "--samples-per-file", per, "--strategy", strategy, "--seed", seed,
                "--epoch", epoch, "--rank", rank, "--world-size", world, "--buffer-size", buffer_size,
                "--block-size", block_size, "--window", window]
        if drop_last:
            args.append("--drop-last")
        theirs = dlfeed.run(*args).stdout.split()
        assert ours == theirs, f"{strategy} rank {rank}/{world}"
        assert len(ours) > 0


def test_explicit_order_is_the_array_strided_by_rank():
    ids = [5, 3, 3, 0, 9, 1, 7]
    for rank in range(2):
        got = [int(x) for x in run("explicit", rank, 2, 10, *ids).stdout.split()]
        padded = ids + ids[:1]  # 7 ids over 2 ranks: padded with the head
        assert got == padded[rank::2]
    err = run("explicit", 0, 1, 4, 1, 9, check=False)
    assert err.returncode == 1 and "indices[1] = 9 is not below the 4 samples" in err.stderr


def test_unknown_strategy_is_named():
    err = run("order", 2, 2, "no_such", 0, 0, 0, 1, 0, 1, 1, 1, check=False)
    assert err.returncode == 1
    assert "unknown order strategy 'no_such'" in err.stderr and "global_feistel" in err.stderr


def npy_expected(path) -> str:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        offset = f.tell()
    shape_s = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    return f"{dtype.str} {shape_s} {int(fortran)} {offset}"


@pytest.mark.parametrize("array", [
    np.arange(12, dtype="<f4").reshape(3, 4),
    np.arange(5, dtype=">i8"),
    np.zeros((2, 3, 4), dtype=np.uint8, order="F"),
    np.array([True, False]),
    np.zeros((0, 7), dtype=np.float16),
])
def test_npy_headers_as_numpy_wrote_them(tmp_path, array):
    path = tmp_path / "a.npy"
    np.save(path, array)
    assert run("npy", path).stdout.strip() == npy_expected(path)


def test_npy_version_2_header(tmp_path):
    path = tmp_path / "v2.npy"
    a = np.arange(6, dtype="<u2").reshape(2, 3)
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    assert run("npy", path).stdout.strip() == npy_expected(path)


def test_npy_bad_magic_names_the_offset(tmp_path):
    path = tmp_path / "bad.npy"
    path.write_bytes(b"\x93NUMPZ" + bytes(20))
    err = run("npy", path, check=False)
    assert err.returncode == 1 and f"{path}: at offset 0: expected the NPY magic" in err.stderr


def test_npz_directory_as_numpy_wrote_it(tmp_path):
    path = tmp_path / "d.npz"
    x, y = np.arange(20, dtype="<f8").reshape(4, 5), np.arange(4, dtype="<i4")
    np.savez(path, x=x, y=y)
    lines = run("npz", path).stdout.strip().splitlines()
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    assert len(lines) == len(infos) == 2
    for line, info, arr in zip(lines, infos, [x, y]):
        name, method, offset, descr, *rest = line.split(" ")
        assert name == info.filename and int(method) == info.compress_type == 0
        with open(path, "rb") as f:  # the member's NPY bytes start at the reported offset
            f.seek(int(offset))
            assert f.read(6) == b"\x93NUMPY"
        assert descr == arr.dtype.str
    compressed = tmp_path / "c.npz"
    np.savez_compressed(compressed, x=x)
    (line,) = run("npz", compressed).stdout.strip().splitlines()
    assert line.split(" ")[:2] == ["x.npy", "8"]
    # Inflated by the header tier's own DEFLATE decoder, no zlib linked.
    assert line.split(" ")[3] == x.dtype.str
    assert line.endswith(f" adler32={zlib.adler32(x.tobytes())}"), line


def test_tfrecord_and_examples_as_tensorflow_wrote_them(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "d.tfrecord"
    rng = np.random.default_rng(7)
    records = []
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(5):
            image = rng.integers(0, 256, size=3 + k, dtype=np.uint8).tobytes()
            floats = rng.standard_normal(k + 1).astype(np.float32)
            ints = [k, -k * 1000, 1 << 40]
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image, b""])),
                "f": tf.train.Feature(float_list=tf.train.FloatList(value=floats)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=ints)),
            }))
            w.write(ex.SerializeToString())
            records.append((image, floats, ints))
    out = run("tfrecord", path).stdout.splitlines()
    offsets = []
    pos = 0
    for rec in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
        offsets.append(pos)
        pos += len(rec) + 16
    assert pos == path.stat().st_size
    expected = []
    for k, (image, floats, ints) in enumerate(records):
        expected.append(f"record {k} {offsets[k]}")
        expected.append("f float_list " + " ".join(f"{float(v):.9g}" for v in floats))
        expected.append("image bytes_list " + image.hex() + " -")
        expected.append("label int64_list " + " ".join(map(str, ints)))
    assert out == expected


def test_tfrecord_corrupt_crc_names_the_offset(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "c.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for k in range(3):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(int64_list=tf.train.Int64List(value=[k]))})).SerializeToString())
    data = bytearray(path.read_bytes())
    first = int.from_bytes(data[:8], "little") + 16
    data[first + 12] ^= 0xFF  # the second record's first payload byte
    path.write_bytes(bytes(data))
    err = run("tfrecord", path, check=False)
    assert err.returncode == 1
    payload_crc_at = first + 12 + int.from_bytes(data[first:first + 8], "little")
    assert f"{path}: at offset {payload_crc_at}: expected payload CRC" in err.stderr, err.stderr


def test_counters_snapshots_merge_as_numpy_computes_them():
    # Two ranks' io_latency events of different ranges (so the job's percentiles are
    # neither rank's), each rank's snapshot through its binary form, merged by the header tier.
    rng = np.random.default_rng(11)
    a = rng.integers(1_000, 50_000, 300)
    b = rng.integers(20_000, 2_000_000, 500)
    out = run("counters", 1.5, 80, ",".join(map(str, a)), 2.5, 60, ",".join(map(str, b))).stdout.splitlines()
    lines = {line.split(" ", 1)[0]: line.split()[1:] for line in out if not line.startswith("refused")}
    both = np.concatenate([a, b])
    assert lines["ranks"] == ["2", "2"]
    count, total, mx, mean, p50, p95, p99 = (float(v) for v in lines["io_latency_ns"])
    assert (count, total, mx) == (len(both), both.sum(), both.max())
    assert mean == pytest.approx(both.mean(), rel=1e-12)
    # Percentiles at their histogram bucket's midpoint: within half a bucket (6.25%) of the exact ones.
    for got, q in ((p50, 0.50), (p95, 0.95), (p99, 0.99)):
        exact = np.quantile(both, q, method="inverted_cdf")
        assert got == pytest.approx(exact, rel=0.0625), (q, got, exact)
    assert int(lines["bytes_read"][0]) == both.sum()
    epoch, wall, wall_min, au, au_min, au_max, nbytes, ranks = lines["epoch"]
    assert (int(epoch), float(wall), float(wall_min)) == (0, 2.5, 1.5)  # the slowest rank's wall time, and the fastest
    assert (float(au), float(au_min), float(au_max)) == (70, 60, 80)  # mean AU over the ranks, and the extremes
    assert (int(nbytes), int(ranks)) == (both.sum(), 2)
    refused = [line for line in out if line.startswith("refused")]
    assert refused == ["refused merge_ranks: snapshot 1 is already a merge of 2 ranks; give one per rank",
                       "refused merge_ranks: rank 1's epoch #0 is epoch 1 but rank 0's is epoch 0"], refused
