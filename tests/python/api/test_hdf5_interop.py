# SPDX-License-Identifier: Apache-2.0
"""HDF5 interop: files written by h5py read by dlfeed, and files written by
`dlfeed generate` read by h5py, byte for byte."""
import os
import pathlib
import re

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "f":
        return rng.random(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype.newbyteorder("="))\
        .astype(dtype)


def _check_all(dlfeed, path, arr, tmp_path, name, layout=None):
    info = dlfeed.inspect(path, "--name", name)
    assert info["num_samples"] == arr.shape[0]
    if layout is not None:
        assert info["sources"][0]["layout"] == layout, info["sources"][0]
    assert name in info["sources"][0]["describe"]
    for k in range(arr.shape[0]):
        s = info["samples"][k]
        assert s["item"] == k
        assert s["shape"] == list(arr.shape[1:])
        assert np.dtype(s["dtype"]) == arr.dtype, (s["dtype"], arr.dtype)
        got = dlfeed.dump_sample(path, k, tmp_path, "--name", name)
        assert got == arr[k].tobytes(), f"sample {k} of {name} in {path}"
    return info


LAYOUTS = [
    # (create_dataset kwargs, expected layout)
    (dict(), "hdf5:contiguous"),
    (dict(chunks=(3, 2, 4)), "hdf5:chunked"),
    (dict(chunks=(1, 5, 7)), "hdf5:chunked"),
    (dict(chunks=(4, 5, 7), compression="gzip", compression_opts=6), "hdf5:chunked+deflate"),
    (dict(chunks=(3, 2, 4), compression="gzip", shuffle=True), "hdf5:chunked+shuffle+deflate"),
    (dict(chunks=(3, 2, 4), compression="gzip", fletcher32=True), "hdf5:library-read"),
    (dict(chunks=(3, 2, 4), fletcher32=True), "hdf5:library-read"),
]


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("kwargs,layout", LAYOUTS)
def test_h5py_layouts(dlfeed, tmp_path, kwargs, layout, libver):
    arr = _data((10, 5, 7), "<f4")
    path = tmp_path / "layouts.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("records", data=arr, **kwargs)
    _check_all(dlfeed, path, arr, tmp_path, "records", layout)


@pytest.mark.parametrize("dtype", ["<f2", "bool", ">f4", ">f8", "<f8", "int8", "uint8", "<i2", ">u2",
                                   "<i4", ">i4", "<u4", "<i8", ">u8"])
@pytest.mark.parametrize("chunked", [False, True])
def test_h5py_dtypes(dlfeed, tmp_path, dtype, chunked):
    arr = _data((6, 3, 4), dtype, seed=1)
    path = tmp_path / "dtypes.h5"
    kwargs = dict(chunks=(4, 3, 2), compression="gzip", shuffle=True) if chunked else {}
    with h5py.File(path, "w") as f:
        f.create_dataset("records", data=arr, **kwargs)
    _check_all(dlfeed, path, arr, tmp_path, "records")


def test_h5py_filter_libhdf5_lacks(dlfeed, tmp_path):
    """LZF (h5py's own filter) is read through libhdf5, which needs its plugin:
    without one the file is refused when indexed (not at the first chunk LZF
    shrank, mid-epoch), naming the file, the filter and the plugin path."""
    arr = _data((4, 3), "<f4")
    path = tmp_path / "lzf.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("records", data=arr, chunks=(2, 3), compression="lzf")
    proc = dlfeed.run("inspect", "--dump-sample", 0, "--out", tmp_path / "s.bin", path, check=False)
    if proc.returncode == 0:  # an LZF plugin is installed
        assert (tmp_path / "s.bin").read_bytes() == arr[0].tobytes()
        info = dlfeed.inspect(path)
        assert info["sources"][0]["layout"] == "hdf5:library-read"
    else:
        assert str(path) in proc.stderr and "filter lzf" in proc.stderr and "HDF5_PLUGIN_PATH" in proc.stderr


def test_h5py_default_name_and_dlio_names(dlfeed, tmp_path):
    a0 = _data((5, 8, 8), "uint8", seed=2)
    a1 = _data((5, 8, 8), "uint8", seed=3)
    path = tmp_path / "img_0_of_1.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("records_0", data=a0)
        f.create_dataset("records_1", data=a1)
        f.create_dataset("labels", data=np.zeros(5, dtype=np.int64))
    info = dlfeed.inspect(path)  # no --name: records_0
    assert "records_0" in info["sources"][0]["describe"]
    assert dlfeed.dump_sample(path, 4, tmp_path) == a0[4].tobytes()
    _check_all(dlfeed, path, a1, tmp_path, "records_1")
    labels = _check_all(dlfeed, path, np.zeros(5, dtype=np.int64), tmp_path, "labels")
    assert labels["samples"][0]["shape"] == []


def test_h5py_records_default(dlfeed, tmp_path):
    arr = _data((4, 3), "<f4")
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("other", data=arr + 1)
        f.create_dataset("records", data=arr)
    assert dlfeed.dump_sample(path, 2, tmp_path) == arr[2].tobytes()


def test_h5py_user_block(dlfeed, tmp_path):
    arr = _data((9, 4, 4), "<i4", seed=4)
    path = tmp_path / "userblock.h5"
    with h5py.File(path, "w", userblock_size=1024) as f:
        f.create_dataset("c", data=arr)
        f.create_dataset("k", data=arr, chunks=(2, 4, 4))
        f.create_dataset("z", data=arr, chunks=(2, 3, 3), compression="gzip")
    for name in ("c", "k", "z"):
        _check_all(dlfeed, path, arr, tmp_path, name)


def test_h5py_partially_written_chunks_are_fill(dlfeed, tmp_path):
    path = tmp_path / "fill.h5"
    arr = np.full((10, 4, 4), 3, dtype="<i2")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("records", shape=(10, 4, 4), dtype="<i2", chunks=(3, 2, 2), fillvalue=3)
        d[2:5] = _data((3, 4, 4), "<i2", seed=5)
        arr[2:5] = d[2:5]
    info = _check_all(dlfeed, path, arr, tmp_path, "records", "hdf5:chunked")
    assert info["samples"][9]["extents"] == []


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("shape,chunks,maxshape", [
    ((8, 8), (4, 4), (8, None)),  # the one unlimited dimension not the first
    ((4, 3, 8), (2, 3, 4), (4, 3, None)),
    ((4, 6, 8), (2, 3, 4), (4, None, 8)),
    ((8, 8), (4, 4), (None, 8)),
    ((8, 8), (4, 4), (None, None)),
])
def test_h5py_growable_datasets_with_unwritten_chunks(dlfeed, tmp_path, libver, shape, chunks, maxshape):
    # libhdf5 lists the chunks of an extensible-array index whose unlimited
    # dimension is not the first at swapped coordinates: read as listed, the
    # rows written came out as the fill value and others' bytes moved.
    path = tmp_path / "grow.h5"
    with h5py.File(path, "w", libver=libver) as f:
        d = f.create_dataset("records", shape=shape, dtype="<i4", chunks=chunks, maxshape=maxshape, fillvalue=-1)
        a = np.arange(np.prod(shape), dtype="<i4").reshape(shape)
        if len(shape) == 2:
            d[:, 0:4] = a[:, 0:4]
        else:
            d[2:4] = a[2:4]
        arr = d[()]
    _check_all(dlfeed, path, arr, tmp_path, "records")
    import dlfeed as dlfeed_py  # the fixture `dlfeed` is the command line

    loader = dlfeed_py.Loader(str(path), batch_size=3, strategy="global_shuffle", seed=1)
    got = {}
    for b in loader:
        for i, k in enumerate(b.sample_ids.tolist()):
            got[k] = b[0][i].copy()
    assert sorted(got) == list(range(shape[0]))
    for k, v in got.items():
        np.testing.assert_array_equal(v, arr[k])


def test_h5py_errors(dlfeed, tmp_path):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=np.zeros((2, 2), dtype="u1"))
        f.create_dataset("names", data=np.array([b"ab", b"cd"]))
        f.create_dataset("scalar", data=np.float32(1))
    err = dlfeed.error("inspect", "--json", path)
    assert str(path) in err and "images" in err and "names" in err
    err = dlfeed.error("inspect", "--json", "--name", "missing", path)
    assert str(path) in err and "'missing'" in err and "images" in err
    err = dlfeed.error("inspect", "--json", "--name", "names", path)
    assert str(path) in err and "string" in err
    err = dlfeed.error("inspect", "--json", "--name", "scalar", path)
    assert str(path) in err and "0-dimensional" in err

    text = tmp_path / "text.h5"
    text.write_text("not hdf5 at all\n")
    assert str(text) in dlfeed.error("inspect", "--json", text)
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    assert str(empty) in dlfeed.error("inspect", "--json", empty)
    whole = tmp_path / "whole.h5"
    with h5py.File(whole, "w") as f:
        f.create_dataset("records", data=np.zeros((100, 32), dtype="<f4"))
    cut = tmp_path / "cut.h5"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert str(cut) in dlfeed.error("inspect", "--json", cut)


GENERATE = [
    [],
    ["--chunk-samples", "3"],
    ["--compression", "deflate", "--chunk-samples", "3"],
    ["--compression", "deflate", "--chunk-samples", "3", "--hdf5-shuffle"],
]


@pytest.mark.parametrize("extra", GENERATE)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bool", "int64"])
def test_generate_read_by_h5py(dlfeed, tmp_path, extra, dtype):
    d = tmp_path / "gen"
    dlfeed.run("generate", "--format", "hdf5", "--dir", d, "--files", 2, "--samples-per-file", 8,
               "--shape", "4,5", "--dtype", dtype, *extra)
    files = sorted(pathlib.Path(d).glob("*.hdf5"))
    assert len(files) == 2
    info = dlfeed.inspect(d)
    assert info["num_samples"] == 16
    for i, p in enumerate(files):
        with h5py.File(p, "r") as f:
            ds = f["records"]
            assert ds.shape == (8, 4, 5)
            assert ds.dtype == np.dtype(dtype)
            if "--chunk-samples" in extra:
                assert ds.chunks == (3, 4, 5)
            assert ds.compression == ("gzip" if "deflate" in extra else None)
            assert ds.shuffle == ("--hdf5-shuffle" in extra)
            arr = ds[()]
            assert f["labels"].dtype == np.int64 and f["labels"].shape == (8,)
        for k in range(8):
            assert dlfeed.dump_sample(d, i * 8 + k, tmp_path) == arr[k].tobytes()


def test_generate_dlio_layout(dlfeed, tmp_path):
    d = tmp_path / "dlio"
    dlfeed.run("generate", "--format", "hdf5", "--dir", d, "--files", 2, "--samples-per-file", 8,
               "--shape", "4,5", "--dtype", "float32", "--layout", "dlio")
    names = sorted(p.name for p in (d / "train").iterdir())
    assert names == ["img_0_of_2.hdf5", "img_1_of_2.hdf5"]
    for i, name in enumerate(names):
        with h5py.File(d / "train" / name, "r") as f:
            assert sorted(f.keys()) == ["labels", "records_0"]
            arr = f["records_0"][()]
            assert arr.shape == (8, 4, 5) and arr.dtype == np.float32
            assert (f["labels"][()] == 0).all()
        for k in range(8):
            assert dlfeed.dump_sample(d / "train", i * 8 + k, tmp_path) == arr[k].tobytes()


@pytest.mark.parametrize("dtype", ["<f2", "<f4", ">f8", "<i8"])
@pytest.mark.parametrize("level", [1, 9])
def test_h5py_gzip_shuffle_large_chunks(dlfeed, tmp_path, dtype, level):
    """Chunks of a sample each, 16 KiB and more, as the decode-bound workloads
    write them (gzip + shuffle): dlfeed's own inflate and unshuffle give
    h5py's values, byte for byte, through the loader and dump_sample."""
    rng = np.random.default_rng(level)
    arr = np.round(rng.standard_normal((6, 64, 33, 4)) * 50, 2).astype(dtype)
    arr[2] = 0  # a chunk of one long run
    path = tmp_path / "gz.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("records", data=arr, chunks=(1, 64, 33, 4), compression="gzip",
                         compression_opts=level, shuffle=True)
    info = _check_all(dlfeed, path, arr, tmp_path, "records", "hdf5:chunked+shuffle+deflate")
    assert len(info["samples"]) == 6
    import dlfeed as dl
    seen = 0
    for b in dl.Loader(str(path), fields=["records"], batch_size=4):
        t = np.asarray(b.tensor("records"))
        np.testing.assert_array_equal(t, arr[np.asarray(b.sample_ids)])
        seen += len(t)
    assert seen == 6


@pytest.mark.parametrize("layout", ["fletcher32", "scaleoffset", "external"])
@pytest.mark.parametrize("change", ["truncate", "zero_fill"])
def test_datasets_read_through_libhdf5_refuse_a_file_changed_under_the_loader(tmp_path, layout, change):
    # Read by H5Dread (no byte extents), a truncated file gave zeros (which
    # pass fletcher32) and a rewritten one libhdf5's cached old values.
    import dlfeed as dlfeed_py

    path, raw = tmp_path / "lib.h5", tmp_path / "lib.raw"
    arr = (np.random.default_rng(0).random((16, 64, 64)) + 1).astype("<f4")
    with h5py.File(path, "w") as f:
        if layout == "fletcher32":
            f.create_dataset("x", data=arr, chunks=(1, 64, 64), fletcher32=True)
        elif layout == "scaleoffset":
            arr = np.arange(16 * 64 * 64, dtype="<i4").reshape(16, 64, 64)
            f.create_dataset("x", data=arr, chunks=(1, 64, 64), scaleoffset=0)
        else:
            f.create_dataset("x", data=arr, external=[(str(raw), 0, h5py.h5f.UNLIMITED)])
    loader = dlfeed_py.Loader(str(path), fields=["x"], batch_size=4, strategy="sequential", resident="off")
    assert loader.stats()["route"] == "pipeline"
    np.testing.assert_array_equal(np.concatenate([b[0] for b in loader]), arr)
    changed = raw if layout == "external" else path
    if change == "truncate":
        os.truncate(changed, changed.stat().st_size // 2)
    else:
        with open(changed, "r+b") as f:
            f.seek(changed.stat().st_size // 2)
            f.write(bytes(4096))
    with pytest.raises(dlfeed_py.DataError, match=re.escape(str(changed)) + r".*(size|modification time)"):
        for _ in loader:
            pass


def test_a_dimension_above_its_maximum_is_a_damaged_file_not_fill_samples(tmp_path):
    """One flipped bit in the dataspace message: 37 samples now say 293 while the maximum stays 37.
    h5py (libhdf5 1.14) refuses the dataset; libhdf5 1.10 would give samples 37-292 as the fill
    value, 256 samples the file never held."""
    import struct

    import dlfeed
    path = tmp_path / "damaged.h5"
    a = np.random.default_rng(0).standard_normal((37, 5, 6)).astype("f4")
    with h5py.File(path, "w") as f:
        f.create_dataset("records", data=a, chunks=(3, 2, 5), compression="gzip", shuffle=True)
    raw = bytearray(path.read_bytes())
    at = raw.find(struct.pack("<QQQ", 37, 5, 6) * 2)  # the dims, then the maximum dims
    assert at >= 0
    raw[at:at + 8] = struct.pack("<Q", 37 + 256)
    path.write_bytes(bytes(raw))
    with pytest.raises(dlfeed.DataError, match=r"damaged.h5.*dimension 0 of dataset 'records' at most its "
                                               r"maximum, 37.*293"):
        dlfeed.Loader(str(path), batch_size=4)
