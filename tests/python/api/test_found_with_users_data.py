# SPDX-License-Identifier: Apache-2.0
"""What trying users' own data and DLIO's found (issue 26): a TFRecord field's
shape rule holds for the whole field, DLIO folders behind links, a field named
like an internal key, ragged= through dlfeed.tf, DataLoader workers with
drop_last_batch, a file rewritten under an open loader, and the small ones.
Fixtures are written by numpy, h5py and TensorFlow as users and DLIO write them."""
import os
import pathlib
import shutil
import subprocess
import time

import h5py
import numpy as np
import pytest

import dlfeed

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def write_dlio_tfrecord(path, d1, d2, size, n, seed, compression=None):
    """n records as DLIO's TFRecordGenerator writes them (`image` raw bytes,
    `size` the nominal side); returns the images. TensorFlow is imported only
    here, so the rest of this file runs without it."""
    pytest.importorskip("tensorflow")
    from test_tfrecord_shape import write_dlio_like

    return write_dlio_like(path, d1, d2, size, n, seed, compression)


def ids_and_values(loader, field=0):
    out = {}
    for batch in loader:
        values = batch[field]
        for i, sid in enumerate(batch.sample_ids):
            out[int(sid)] = np.array(values[i])
    return out


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_cosmoflow_with_record_length_stdev_is_one_d_for_the_whole_field(tmp_path, compression):
    # DLIO's cosmoflow with record_length_stdev: sides drawn per file, `size` the
    # nominal 12. One file's draw came out 12 x 12 (its `size` describes it), the
    # other's 10 x 14 (it does not): every file of the field is then 1-D, no ragged.
    train = tmp_path / "cosmoflow" / "train"
    want = write_dlio_tfrecord(train / "img_0_of_2.tfrecord", 12, 12, 12, 1, seed=1, compression=compression)
    want += write_dlio_tfrecord(train / "img_1_of_2.tfrecord", 10, 14, 12, 1, seed=2, compression=compression)
    loader = dlfeed.Loader(train, fields=["image"], batch_size=1)
    assert loader.field_specs()[0][2] == (None,)
    got = ids_and_values(loader)
    assert sorted(got) == [0, 1]
    for sid, value in got.items():
        assert value.ndim == 1
        np.testing.assert_array_equal(value, want[sid].reshape(-1))
    # The index cache keeps each file's verdict, so a reopen from it applies the rule too.
    for _ in range(2):
        cached = dlfeed.Loader(train, fields=["image"], batch_size=1, index_cache=str(tmp_path / "cache"))
        assert cached.field_specs()[0][2] == (None,)
        assert {k: v.tolist() for k, v in ids_and_values(cached).items()} == {k: v.tolist() for k, v in got.items()}
    # The square file alone keeps its shape (the rule is per field, not a change of the default).
    alone = dlfeed.Loader(train / "img_0_of_2.tfrecord", fields=["image"], batch_size=1)
    assert alone.field_specs()[0][2] == (12, 12)


def test_a_dlio_folder_whose_train_is_a_link_is_read(tmp_path):
    real = tmp_path / "elsewhere" / "train_files"
    real.mkdir(parents=True)
    for i in range(2):
        np.savez(real / f"img_{i}_of_2.npz", x=np.full((4, 4, 3), i, dtype=np.uint8), y=np.zeros(3, np.int64))
    data = tmp_path / "data"
    data.mkdir()
    (data / "train").symlink_to(real, target_is_directory=True)  # and no valid/
    (data / "train_again").symlink_to(data, target_is_directory=True)  # a loop: walked once
    loader = dlfeed.Loader(data, fields=["x"], batch_size=6)
    assert loader.num_samples == 6
    batch = next(iter(loader))
    assert sorted(np.array(batch[0])[:, 0, 0].tolist()) == [0, 0, 0, 1, 1, 1]


def test_a_field_named_sample_ids_is_never_hidden_by_as_dict(tmp_path):
    torch = pytest.importorskip("torch")
    import dlfeed.torch as dtorch

    path = tmp_path / "users.npz"
    np.savez(path, x=np.arange(12, dtype=np.float32).reshape(4, 3), sample_ids=np.array([7, 8, 9, 10]))
    with pytest.raises(ValueError, match="field named 'sample_ids'"):
        dtorch.Dataset(path, fields=["x", "sample_ids"], batch_size=2, as_dict=True)
    ds = dtorch.Dataset(path, fields="sample_ids", batch_size=2, as_dict=True)  # known when the loader is made
    with pytest.raises(ValueError, match="field named 'sample_ids'"):
        next(iter(ds))
    # As a tuple, the user's member is what it is.
    x, ids = next(iter(dtorch.Dataset(path, fields=["x", "sample_ids"], batch_size=4)))
    assert ids.tolist() == [7, 8, 9, 10] and torch.equal(x, torch.arange(12, dtype=torch.float32).reshape(4, 3))


def test_tf_dataset_passes_ragged_to_the_loader_it_makes(tmp_path):
    tf = pytest.importorskip("tensorflow")
    import dlfeed.tf as dtf

    np.save(tmp_path / "x_000.npy", np.arange(6, dtype=np.int32).reshape(2, 3))
    np.save(tmp_path / "x_001.npy", np.arange(10, dtype=np.int32).reshape(2, 5))
    ds = dtf.dataset(tmp_path, fields=["x"], ragged=True, batch_size=4)
    (batch,) = list(ds)
    assert isinstance(batch, tf.RaggedTensor)
    assert batch.to_list() == [[0, 1, 2], [3, 4, 5], [0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


@pytest.mark.parametrize("workers", [2, 4])
def test_dataloader_workers_give_the_ranks_batches_with_drop_last_batch(tmp_path, workers):
    torch = pytest.importorskip("torch")
    import dlfeed.torch as dtorch

    np.save(tmp_path / "x.npy", np.arange(1000, dtype=np.int64))
    kw = dict(batch_size=64, strategy="global_shuffle", seed=4, drop_last_batch=True)
    direct = [tuple(b.tolist()) for b in dtorch.Dataset(tmp_path / "x.npy", **kw)]
    assert len(direct) == 1000 // 64
    ds = dtorch.Dataset(tmp_path / "x.npy", **kw)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    assert len(dl) == 15
    got = [tuple(b.tolist()) for b in dl]
    assert len(got) == len(dl) and all(len(b) == 64 for b in got)
    assert sorted(got) == sorted(direct)  # the same batches, whatever the number of workers
    # Without drop_last_batch the rank's one partial batch is the last worker's.
    kw["drop_last_batch"] = False
    dl = torch.utils.data.DataLoader(dtorch.Dataset(tmp_path / "x.npy", **kw), batch_size=None, num_workers=workers)
    sizes = sorted(len(b) for b in dl)
    assert len(sizes) == len(dl) == 16 and sizes[0] == 1000 - 15 * 64 and sizes[1:] == [64] * 15


def test_a_file_rewritten_in_place_under_an_open_loader_is_named(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(64, dtype=np.float32).reshape(16, 4))
    loader = dlfeed.Loader(path, batch_size=4, resident="off")
    first = [np.array(b[0]) for b in loader]
    assert len(first) == 4
    inode = path.stat().st_ino
    time.sleep(0.02)
    with open(path, "r+b") as f:  # in place: same inode, new header and bytes (float64 now)
        np.lib.format.write_array(f, np.arange(32, dtype=np.float64).reshape(8, 4))
    assert path.stat().st_ino == inode
    with pytest.raises(dlfeed.DataError) as e:
        list(loader)
    msg = str(e.value)
    assert str(path) in msg and "changed in place" in msg, msg


@pytest.mark.parametrize("how", ["utime", "rsync"])
def test_a_rewrite_that_keeps_size_and_mtime_is_named_by_its_change_time(tmp_path, how):
    # rsync --inplace -t, tar -x over a file, or a write then os.utime: the
    # same inode, size and mtime, new bytes. Only st_ctime tells.
    path = tmp_path / "x.npy"
    np.save(path, np.full((16, 4), 12, dtype=np.float32))
    loader = dlfeed.Loader(path, batch_size=4, resident="off")
    assert float(np.array(next(iter(loader))[0])[0, 0]) == 12.0
    before = path.stat()
    time.sleep(0.02)
    new = tmp_path / "new.npy"
    np.save(new, np.full((16, 4), 12, dtype=np.int32))  # same size: int32 and float32
    assert new.stat().st_size == before.st_size
    if how == "rsync" and shutil.which("rsync"):
        subprocess.run(["rsync", "--inplace", "-t", str(new), str(path)], check=True)
    else:
        path.write_bytes(new.read_bytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    with pytest.raises(dlfeed.DataError) as e:
        list(loader)
    msg = str(e.value)
    assert str(path) in msg and "change time (ctime)" in msg and "changed in place" in msg, msg
    # A loader made now reads what the file holds.
    fresh = dlfeed.Loader(path, batch_size=4, resident="off")
    got = np.array(next(iter(fresh))[0])
    assert got.dtype == np.int32 and got[0, 0] == 12


@pytest.mark.parametrize("resident", ["auto", "on"])
def test_a_held_file_rewritten_in_place_with_its_mtime_kept_is_read_as_it_is_now(tmp_path, resident):
    # New values at the same places (the layout unchanged), mtime set back:
    # a file read from disk gives the new values at the next epoch; a held
    # copy of the old bytes must not be served instead.
    path = tmp_path / "x.npy"
    np.save(path, np.zeros((8, 4), dtype=np.float32))
    loader = dlfeed.Loader(path, batch_size=4, strategy="sequential", resident=resident)
    assert all(float(np.array(b[0]).max()) == 0.0 for b in loader)
    assert loader.stats()["resident_bytes"] > 0
    before = path.stat()
    time.sleep(0.02)
    with open(path, "r+b") as f:
        f.seek(128)
        f.write(np.ones((8, 4), dtype=np.float32).tobytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    got = np.concatenate([np.array(b[0]) for b in loader])
    np.testing.assert_array_equal(got, np.ones((8, 4), dtype=np.float32))
    assert "changed in place since they were read" in loader.stats()["resident_reason"]
    got = np.concatenate([np.array(b[0]) for b in loader])  # and on
    np.testing.assert_array_equal(got, np.ones((8, 4), dtype=np.float32))


def test_a_metadata_change_or_a_rewrite_that_reads_alike_goes_on(tmp_path):
    # chmod sets the change time too; so does a rewrite of new values of the
    # same dtype and shape with the mtime set back. The file is indexed again
    # at the next epoch: its samples are where they were, so it reads on,
    # and what it reads is what the file holds now.
    path = tmp_path / "x.npy"
    np.save(path, np.full((16, 4), 12, dtype=np.float32))
    loader = dlfeed.Loader(path, batch_size=4, resident="off")
    assert float(np.array(next(iter(loader))[0])[0, 0]) == 12.0
    time.sleep(0.02)
    os.chmod(path, 0o640)
    assert [float(np.array(b[0])[0, 0]) for b in loader] == [12.0] * 4
    before = path.stat()
    time.sleep(0.02)
    new = tmp_path / "new.npy"
    np.save(new, np.full((16, 4), 5, dtype=np.float32))
    path.write_bytes(new.read_bytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [float(np.array(b[0])[0, 0]) for b in loader] == [5.0] * 4


def test_small_ones(tmp_path):
    np.savez(tmp_path / "d.npz", a=np.zeros((4, 2), np.float32), b=np.ones(4, np.int64))
    with pytest.raises(dlfeed.InvalidArgumentError, match="field 'a' is named twice"):
        dlfeed.Loader(tmp_path / "d.npz", fields=["a", "a"])
    loader = dlfeed.Loader(tmp_path / "d.npz", fields=["a"])
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        loader.write_trace(tmp_path / "t.json")
    assert "trace=True" in str(e.value) and "--trace" not in str(e.value)
    # A 0-d array: a valid file dlfeed does not read as samples (docs/formats.md: InvalidArgumentError).
    np.save(tmp_path / "scalar.npy", np.float32(1))
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path / "scalar.npy")
    assert "scalar.npy" in str(e.value) and "0-d" in str(e.value)
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f.create_dataset("scalar", data=np.float32(1))
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path / "s.h5", name="scalar")
    assert "s.h5" in str(e.value) and "0-dimensional" in str(e.value) and "axis=\"none\"" in str(e.value)


def test_a_scalar_hdf5_dataset_read_whole_is_one_sample_of_shape_empty(tmp_path):
    # One sample per file with a 0-d label beside its array: axis="none" reads the scalar as a sample of
    # shape (), as an 0-d NPY reads; contiguous (extents), compact (through libhdf5), and from the index cache.
    for i in range(3):
        with h5py.File(tmp_path / f"s{i}.h5", "w") as f:
            f["x"] = np.full((2, 3), i, np.float32)
            f.create_dataset("label", data=np.int64(10 + i))
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            d = h5py.h5d.create(f.id, b"w", h5py.h5t.IEEE_F64BE, h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl)
            d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(0.5 + i, ">f8"))
    for cache in (None, tmp_path / "idx", tmp_path / "idx"):
        loader = dlfeed.Loader(tmp_path, axis="none", fields=["x", "label", "w"], batch_size=3,
                               strategy="sequential", index_cache=cache)
        (b,) = list(loader)
        assert np.array(b["label"]).shape == (3,) and np.array(b["label"]).tolist() == [10, 11, 12]
        assert np.array(b["w"]).tolist() == [0.5, 1.5, 2.5]
        assert np.array(b["x"]).shape == (3, 2, 3) and np.array(b["x"])[:, 0, 0].tolist() == [0, 1, 2]


def test_a_fifo_named_as_a_data_file_is_refused_not_waited_on(tmp_path):
    # A FIFO's open waits for a writer: named as a data file, it was a hang; in a folder it is not data.
    import sys
    os.mkfifo(tmp_path / "x.npy")
    script = ("import sys, dlfeed\n"
              "try:\n    dlfeed.Loader(sys.argv[1])\n"
              "except dlfeed.InvalidArgumentError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.npy")], capture_output=True, text=True,
                          timeout=60)
    assert "x.npy: is not a regular file (a FIFO)" in proc.stdout, proc.stdout + proc.stderr
    np.save(tmp_path / "y.npy", np.zeros((3, 2), np.float32))
    assert dlfeed.Loader(tmp_path).num_samples == 3


def test_epoch_numbers_out_of_range_are_refused(tmp_path):
    # An epoch whose next would not fit 64 bits, or a negative one: a ValueError naming the range,
    # not a TypeError from the binding one iteration later.
    np.save(tmp_path / "e.npy", np.zeros((5, 2), np.float32))
    loader = dlfeed.Loader(tmp_path / "e.npy", batch_size=2)
    for bad in (-1, 2**64 - 1, 2**64):
        with pytest.raises(ValueError, match="expected an int from 0 to 18446744073709551614"):
            loader.iter_epoch(bad)
    with pytest.raises(ValueError, match="epoch -3"):
        loader.epoch = -3
    for first in (-1, 2**64 - 1):
        with pytest.raises(ValueError, match="expected an int from 0 to"):
            loader.iter_epochs(first=first)
    with pytest.raises(ValueError, match="expected an int from 0 to"):
        loader.iter_epochs(first=2**64 - 3, count=3)
    assert sum(len(b) for b in loader.iter_epoch(2**64 - 2)) == 5


def test_a_fifo_in_place_of_an_index_file_is_not_waited_on(tmp_path):
    # A FIFO where a TFRecord's .idx sidecar or the index cache would be: a clear error, or the
    # cache read as absent (and written again), never an open that waits for a writer.
    import sys
    from conftest import dlfeed_binary
    subprocess.run([dlfeed_binary(), "generate", "--format", "tfrecord", "--dir", str(tmp_path / "g"), "--files", "1",
                    "--samples-per-file", "4", "--shape", "8"], check=True, capture_output=True)
    data = next((tmp_path / "g").rglob("*.tfrecord"))
    if os.path.exists(f"{data}.idx"):
        os.remove(f"{data}.idx")
    os.mkfifo(f"{data}.idx")
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    os.mkfifo(tmp_path / "cache")
    script = ("import sys, dlfeed\n"
              "try:\n    dlfeed.Loader(sys.argv[1])\n"
              "except dlfeed.InvalidArgumentError as e:\n    print(e)\n"
              "print(dlfeed.Loader(sys.argv[2], index_cache=sys.argv[3]).num_samples)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(data), str(tmp_path / "x.npy"), str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=60)
    assert f"{data}.idx: is not a regular file (a FIFO)" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("4"), proc.stdout + proc.stderr
    assert (tmp_path / "cache").is_file(), "the cache written again in the FIFO's place"


def test_axis_last_on_an_hdf5_dataset_outside_dlios_layout_is_refused(tmp_path):
    # An HDF5 dataset is read on axis 0: axis="last" asked for gave 2 samples of (3, 4) from a
    # (2, 3, 4) dataset where 4 of (2, 3) were asked for, in silence.
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["data"] = x
    with pytest.raises(dlfeed.InvalidArgumentError, match=r"f\.h5: axis 'last' \(also layout 'dlio'\) reads NPY and NPZ"):
        dlfeed.Loader(tmp_path / "f.h5", axis="last")
    # DLIO's files (its HDF5 samples on axis 0), in its folders or copied elsewhere: layout="dlio"
    # reads them so.
    for folder in ("train", "copy"):
        (tmp_path / folder).mkdir()
        with h5py.File(tmp_path / folder / "img_0_of_1.h5", "w") as f:
            f["records"] = x
        loader = dlfeed.Loader(tmp_path / folder, layout="dlio", batch_size=2)
        (b,) = list(loader)
        assert np.array_equal(np.array(b[0]), x)


def test_inspect_says_what_run_would_refuse(tmp_path):
    # A folder whose files disagree in dtype: inspect listed both and exited 0 while run refused it.
    from conftest import dlfeed_binary
    np.save(tmp_path / "a.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((3, 2), np.float64))
    proc = subprocess.run([dlfeed_binary(), "inspect", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1 and "a.npy" in proc.stdout
    assert "dlfeed run refuses these files: field 'data'" in proc.stderr and "needs one dtype" in proc.stderr
    (tmp_path / "b.npy").unlink()
    np.save(tmp_path / "b.npy", np.zeros((3, 4), np.float32))  # shapes differ: read with ragged
    proc = subprocess.run([dlfeed_binary(), "inspect", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0 and "note: field 'data'" in proc.stderr and "ragged" in proc.stderr


def test_an_hdf5_dataset_named_with_an_equals_sign_can_be_named(tmp_path):
    # "x=y" was parsed as NAME=PATTERN and refused, in fields= and name= alike; a pattern has a '*'.
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["x=y"] = np.arange(10, dtype=np.int32)
        f["other"] = np.arange(10, 20, dtype=np.int32)
    for kw in (dict(fields=["x=y"]), dict(fields="x=y"), dict(name="x=y")):
        loader = dlfeed.Loader(tmp_path / "f.h5", batch_size=10, strategy="sequential", **kw)
        assert loader.field_names == ["x=y"] and np.array(next(iter(loader))[0]).tolist() == list(range(10))
    loader = dlfeed.Loader(tmp_path, fields=["v=f*.h5:x=y"], batch_size=10, strategy="sequential")
    assert np.array(next(iter(loader))[0]).tolist() == list(range(10))
