# SPDX-License-Identifier: Apache-2.0
"""The persistent dataset index (index_cache="auto"), on files numpy, h5py and
TensorFlow wrote: a reopen reads the same values, a file rewritten between
runs is indexed again (never an old extent over new bytes), and a damaged
cache is reported and not used."""
import glob
import os

import h5py
import numpy as np
import pytest

import dlfeed


def all_samples(loader, field=0):
    out = {}
    for batch in loader:
        for i, sid in enumerate(batch.sample_ids):
            out[int(sid)] = np.array(batch[field][i])
    return out


def write_npz(path, first, n):
    np.savez(path, x=np.arange(first, first + n * 6, dtype=np.float32).reshape(n, 2, 3))


def write_h5(path, first, n, chunks=None):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(first, first + n * 6, dtype=np.int32).reshape(n, 2, 3), chunks=chunks,
                         compression="gzip" if chunks else None)


@pytest.mark.parametrize("kind", ["npz", "h5", "h5_chunked"])
def test_reopen_from_the_cache_reads_the_same_and_sees_a_rewritten_file(tmp_path, kind):
    ext = "npz" if kind == "npz" else "h5"
    for i in range(4):
        p = tmp_path / f"part{i}.{ext}"
        if kind == "npz":
            write_npz(p, 100 * i, 5)
        else:
            write_h5(p, 100 * i, 5, chunks=(2, 2, 3) if kind == "h5_chunked" else None)
    kw = dict(name="x", batch_size=4, index_cache="auto")
    first = all_samples(dlfeed.Loader(tmp_path, **kw))
    caches = glob.glob(str(tmp_path / ".dlfeed" / "index-*"))
    assert len(caches) == 1, os.listdir(tmp_path)
    again = all_samples(dlfeed.Loader(tmp_path, **kw))
    assert first.keys() == again.keys() and len(first) == 20
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])
    np.testing.assert_array_equal(again[6].ravel(), np.arange(106, 112))  # file 1, sample 1

    # File 2 rewritten with other values and more samples: the cache entry is stale.
    p = tmp_path / f"part2.{ext}"
    if kind == "npz":
        write_npz(p, 5000, 7)
    else:
        write_h5(p, 5000, 7, chunks=(2, 2, 3) if kind == "h5_chunked" else None)
    fresh = all_samples(dlfeed.Loader(tmp_path, **kw))
    assert len(fresh) == 22
    np.testing.assert_array_equal(fresh[10].ravel(), np.arange(5000, 5006))
    np.testing.assert_array_equal(fresh[21].ravel(), np.arange(300 + 24, 300 + 30))  # file 3's last


def test_tfrecord_written_by_tensorflow_from_the_cache(tmp_path):
    tf = pytest.importorskip("tensorflow")
    values = [np.arange(k, k + 8, dtype=np.uint8).tobytes() for k in range(30)]
    for f in range(3):
        with tf.io.TFRecordWriter(str(tmp_path / f"d{f}.tfrecord")) as w:
            for v in values[f * 10:(f + 1) * 10]:
                ex = tf.train.Example(features=tf.train.Features(
                    feature={"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))}))
                w.write(ex.SerializeToString())
    cache = tmp_path / "elsewhere" / "my.idx"
    kw = dict(batch_size=8, index_cache=str(cache))
    for _ in range(2):  # written, then read from
        got = all_samples(dlfeed.Loader(tmp_path, **kw))
        assert cache.exists()
        assert [got[k].tobytes() for k in range(30)] == values


def test_a_damaged_cache_is_reported_and_not_used(tmp_path, capfd):
    for i in range(3):
        write_npz(tmp_path / f"p{i}.npz", 10 * i, 4)
    kw = dict(name="x", batch_size=4, index_cache="auto")
    want = all_samples(dlfeed.Loader(tmp_path, **kw))
    (cache,) = glob.glob(str(tmp_path / ".dlfeed" / "index-*"))
    data = bytearray(open(cache, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(cache, "wb").write(bytes(data))
    capfd.readouterr()
    got = all_samples(dlfeed.Loader(tmp_path, **kw))
    err = capfd.readouterr().err
    assert "is not used" in err and "checksum" in err and cache in err, err
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])


def rewrite_keeping_mtime(path, array):
    """Rewrites `path` in place at the same size with other bytes, its modification time put back (rsync
    --inplace -t, tar -x, cp -p over it): only the change time tells."""
    before = path.stat()
    new = path.parent.parent / ("new_" + path.name)  # not in the folder: its stamp stays
    np.save(new, array)
    assert new.stat().st_size == before.st_size
    path.write_bytes(new.read_bytes())
    new.unlink()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_folders_check_never_reads_a_file_rewritten_with_its_mtime_put_back_with_the_old_index(tmp_path):
    # index_cache_check="folders" trusts the folders' stamps (no stat per file), so the cache gives the
    # files' recorded identities; the first open finds the change time new and indexes the file again
    # before anything is read from it.
    d = tmp_path / "d"
    d.mkdir()
    for i in range(2):
        np.save(d / f"x_{i}.npy", np.full((8, 4), i, dtype=np.float32))
    old = d.stat().st_mtime_ns - 10**10
    os.utime(d, ns=(old, old))  # a folder stamp older than a few seconds is trusted
    kw = dict(batch_size=4, index_cache=tmp_path / "cache", index_cache_check="folders", resident="off",
              strategy="sequential")
    assert len(all_samples(dlfeed.Loader(d, **kw))) == 16
    rewrite_keeping_mtime(d / "x_0.npy", np.full((4, 8), 7, dtype=np.float32))  # another shape
    assert d.stat().st_mtime_ns == old
    with pytest.raises(dlfeed.DataError, match=r"x_0\.npy.*indexed again, its samples are not where they were"):
        all_samples(dlfeed.Loader(d, **kw))
    # The same layout, new values: read as the file holds them now.
    rewrite_keeping_mtime(d / "x_0.npy", np.full((8, 4), 9, dtype=np.float32))
    got = all_samples(dlfeed.Loader(d, **kw))
    assert [float(got[k][0]) for k in range(8)] == [9.0] * 8


def test_a_closed_file_rewritten_between_epochs_with_its_mtime_put_back_is_indexed_again_at_its_open(tmp_path):
    # One descriptor open at a time: x_0's is closed when the epoch ends, so the epoch's start does not see
    # the rewrite; its next open does, before anything is read.
    for i in range(2):
        np.save(tmp_path / f"x_{i}.npy", np.full((8, 4), i, dtype=np.float32))
    loader = dlfeed.Loader(tmp_path, batch_size=4, resident="off", strategy="sequential", max_open_files=1)
    assert len(all_samples(loader)) == 16
    rewrite_keeping_mtime(tmp_path / "x_0.npy", np.full((8, 4), 5, dtype=np.int32))  # same shape, another dtype
    with pytest.raises(dlfeed.DataError, match=r"x_0\.npy.*indexed again, its samples are not where they were"):
        all_samples(loader)


def test_a_cache_path_given_for_several_fields_keeps_one_file_per_field(tmp_path, capfd):
    """index_cache=PATH with fields x and y: each field's open wrote PATH over the other's (other format
    options), so every run said the cache was not used and wrote it twice. Each field now has PATH.FIELD,
    and a second run uses both, unchanged."""
    d = tmp_path / "d"
    d.mkdir()
    for f in range(3):
        np.savez(d / f"p{f}.npz", x=np.arange(f * 10, f * 10 + 10, dtype=np.float32).repeat(3).reshape(10, 3),
                 y=np.arange(f * 10, f * 10 + 10, dtype=np.int64))
    cache = tmp_path / "c.idx"
    kw = dict(fields=["x", "y"], batch_size=4, index_cache=str(cache), strategy="sequential")
    for run in range(2):
        got = [(np.asarray(b["x"])[:, 0], np.asarray(b["y"])) for b in dlfeed.Loader(d, **kw)]
        np.testing.assert_array_equal(np.concatenate([x for x, _ in got]), np.arange(30))
        np.testing.assert_array_equal(np.concatenate([y for _, y in got]), np.arange(30))
        if run == 0:
            stamps = {p: os.stat(p).st_mtime_ns for p in (f"{cache}.x", f"{cache}.y")}
    assert "is not used" not in capfd.readouterr().err
    assert {p: os.stat(p).st_mtime_ns for p in stamps} == stamps  # read, not written again
    assert not cache.exists()
