# SPDX-License-Identifier: Apache-2.0
"""NPY and NPZ interop: numpy writes, dlfeed reads byte-identically; dlfeed
generates, numpy reads the same content."""
import io
import zipfile

import numpy as np
import pytest

DTYPES = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", ">f4", ">i4", ">u8"]


def make_array(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dt)
    if dt.kind == "f":
        return rng.random(size=shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt.newbyteorder("=")).astype(dt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_np_save_read_on_first_axis(dlfeed, tmp_path, dtype):
    arr = make_array((5, 3, 4), dtype)
    path = tmp_path / "a.npy"
    np.save(path, arr)
    info = dlfeed.inspect(path, "--axis", "first")
    assert info["num_samples"] == 5
    assert info["samples"][2]["shape"] == [3, 4]
    assert info["samples"][2]["dtype"] == arr.dtype.str
    for k in range(5):
        assert dlfeed.dump_sample(path, k, tmp_path, "--axis", "first") == arr[k].tobytes()


@pytest.mark.parametrize("dtype", ["|u1", "<f4", ">f8", "|b1"])
@pytest.mark.parametrize("fortran", [False, True])
def test_last_axis_and_fortran_order_are_gathered(dlfeed, tmp_path, dtype, fortran):
    arr = make_array((3, 4, 6), dtype, seed=1)
    if fortran:
        arr = np.asfortranarray(arr)
    path = tmp_path / "a.npy"
    np.save(path, arr)
    for k in range(6):
        assert dlfeed.dump_sample(path, k, tmp_path, "--axis", "last") == arr[..., k].tobytes(order="C")
    for k in range(3):
        assert dlfeed.dump_sample(path, k, tmp_path, "--axis", "first") == arr[k].tobytes(order="C")


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_format_versions(dlfeed, tmp_path, version):
    arr = make_array((4, 7), "<i4", seed=2)
    path = tmp_path / "v.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=version)
    info = dlfeed.inspect(path, "--axis", "first")
    assert "NPY %d.%d" % version in info["sources"][0]["describe"]
    assert dlfeed.dump_sample(path, 3, tmp_path, "--axis", "first") == arr[3].tobytes()


@pytest.mark.parametrize("compressed", [False, True])
def test_savez_members(dlfeed, tmp_path, compressed):
    x = make_array((6, 8, 8), "<f4", seed=3)
    y = np.arange(6, dtype=np.int64)
    path = tmp_path / "d.npz"
    (np.savez_compressed if compressed else np.savez)(path, x=x, y=y)
    info = dlfeed.inspect(path, "--axis", "first")
    assert info["sources"][0]["layout"] == ("npz:deflated" if compressed else "npz:stored")
    assert info["num_samples"] == 6
    for k in range(6):
        assert dlfeed.dump_sample(path, k, tmp_path, "--axis", "first") == x[k].tobytes()
        assert dlfeed.dump_sample(path, k, tmp_path, "--name", "y") == y[k].tobytes()
    if not compressed:
        # Stored members: the extent is the sample's bytes in the archive itself.
        raw = path.read_bytes()
        off, length = info["samples"][4]["extents"][0]
        assert raw[off:off + length] == x[4].tobytes()


def test_dlio_style_npz_samples_on_last_axis(dlfeed, tmp_path):
    # As the DLIO benchmark writes: np.savez(x=records (d1, d2, n), y=[0]*n), name img_i_of_n, in train/.
    records = make_array((16, 12, 5), "|u1", seed=4)
    (tmp_path / "train").mkdir()
    path = tmp_path / "train" / "img_3_of_8.npz"
    np.savez(path, x=records, y=np.zeros(5, dtype=np.int64))
    with zipfile.ZipFile(path) as z:  # numpy writes Zip64 local headers
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    info = dlfeed.inspect(path)
    assert info["num_samples"] == 5 and info["samples"][0]["shape"] == [16, 12]
    for k in range(5):
        assert dlfeed.dump_sample(path, k, tmp_path) == records[..., k].tobytes()


def test_older_dlio_names_without_padding_read_as_one_layout(tmp_path):
    # DLIO's releases before it padded the index wrote img_3_of_12.npz: img_10 and img_11 (the index at
    # n's width) were read on the last axis and img_0..img_9 on the first, one dataset in two layouts; with
    # cube-shaped records 60 of DLIO's 72 samples never came, without an error.
    import dlfeed as api
    train = tmp_path / "data" / "train"
    train.mkdir(parents=True)
    want = []
    for i in range(12):
        records = make_array((6, 6, 6), "|u1", seed=i)  # (d1, d2, samples): each sample is records[..., k]
        np.savez(train / f"img_{i}_of_12.npz", x=records, y=np.zeros(6, dtype=np.int64))
        want += [records[..., k].tobytes() for k in range(6)]
    loader = api.Loader(train, batch_size=8)
    got = [np.ascontiguousarray(b["data"][i]).tobytes() for b in loader for i in range(len(b.sample_ids))]
    assert sorted(got) == sorted(want)
    # A dataset whose files are partly in DLIO's layout and partly not is refused, naming one of each.
    np.savez(train / "extra.npz", x=make_array((6, 6, 6), "|u1", seed=99))
    with pytest.raises(api.InvalidArgumentError, match=r"img_0_of_12.npz is in DLIO's layout .* but .*extra.npz"):
        api.Loader(train, batch_size=8)
    assert len(list(api.Loader(train, batch_size=8, layout="dlio", ragged=True))) > 0


@pytest.mark.parametrize("fmt,layout", [("npy", "flat"), ("npy", "dlio"), ("npz", "flat"), ("npz", "dlio")])
@pytest.mark.parametrize("dtype", ["uint8", "float32", "float16", "int64", "bool"])
def test_generated_datasets_read_by_numpy(dlfeed, tmp_path, fmt, layout, dtype):
    d = tmp_path / "data"
    dlfeed.run("generate", "--format", fmt, "--dir", d, "--files", 2, "--samples-per-file", 3,
               "--shape", "4,5", "--dtype", dtype, "--layout", layout, "--seed", 7)
    folder = d / "train" if layout == "dlio" else d
    files = sorted(folder.glob(f"*.{fmt}"))
    if layout == "dlio":
        assert [f.name for f in files] == [f"img_0_of_2.{fmt}", f"img_1_of_2.{fmt}"]
    else:
        assert [f.name for f in files] == [f"img_0.{fmt}", f"img_1.{fmt}"]
    info = dlfeed.inspect(folder)
    assert info["num_samples"] == 6
    for i, f in enumerate(files):
        if fmt == "npz":
            with np.load(f) as z:
                assert sorted(z.files) == ["x", "y"]
                arr, labels = z["x"], z["y"]
            assert labels.dtype == np.int64
            if layout == "dlio":
                assert not labels.any()  # DLIO writes zero labels
        else:
            arr = np.load(f)
        assert arr.dtype == np.dtype(dtype)
        if layout == "dlio":
            assert arr.shape == (4, 5, 3)
        else:
            assert arr.shape == (3, 4, 5)
        for k in range(3):
            sample = arr[..., k] if layout == "dlio" else arr[k]
            assert dlfeed.dump_sample(folder, 3 * i + k, tmp_path) == sample.tobytes()
    if dtype.startswith("float"):
        assert 0.0 <= arr.min() and arr.max() < 1.0


def test_generated_compressed_npz_is_savez_compressed_compatible(dlfeed, tmp_path):
    d = tmp_path / "c"
    dlfeed.run("generate", "--format", "npz", "--dir", d, "--files", 1, "--samples-per-file", 4,
               "--shape", "32,32", "--compression", "deflate")
    f = d / "img_0.npz"
    with zipfile.ZipFile(f) as z:
        assert z.testzip() is None
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    x = np.load(f)["x"]
    for k in range(4):
        assert dlfeed.dump_sample(f, k, tmp_path) == x[k].tobytes()


def test_object_and_structured_arrays_are_refused(dlfeed, tmp_path):
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    err = dlfeed.error("inspect", obj)
    assert str(obj) in err and "object" in err and "offset" in err
    st = tmp_path / "st.npy"
    np.save(st, np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]))
    err = dlfeed.error("inspect", st)
    assert str(st) in err and "structured" in err


def test_bad_inputs_name_file_and_offset(dlfeed, tmp_path):
    arr = make_array((4, 16), "<f8", seed=5)
    good = tmp_path / "good.npy"
    np.save(good, arr)
    raw = good.read_bytes()
    cut = tmp_path / "cut.npy"
    cut.write_bytes(raw[:-9])
    err = dlfeed.error("inspect", cut)
    assert str(cut) in err and "at offset 128" in err and "512 bytes of array data" in err
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    assert str(empty) in dlfeed.error("inspect", empty)
    z = tmp_path / "z.npz"
    np.savez(z, a=arr)
    err = dlfeed.error("inspect", "--name", "x", z)
    assert "no member 'x'" in err and "'a'" in err
    # A deflated member with a flipped byte: inflate or CRC-32 check fails on read.
    zc = tmp_path / "zc.npz"
    np.savez_compressed(zc, x=arr)
    info = dlfeed.inspect(zc, "--axis", "first")
    off, length = info["samples"][0]["extents"][0]
    b = bytearray(zc.read_bytes())
    b[off + length // 2] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(b))
    err = dlfeed.error("inspect", "--axis", "first", "--dump-sample", 1, "--out", tmp_path / "o.bin", bad)
    assert str(bad) in err and "offset" in err


@pytest.mark.parametrize("order", [("x", "x.npy"), ("x.npy", "x")])
def test_a_member_named_as_asked_wins_over_one_with_npy_as_numpy_picks_it(dlfeed, tmp_path, order):
    """An archive holding both 'x' and 'x.npy' (zipfile can write one): np.load(f)['x'] is
    member 'x', whatever the order; dlfeed reads the same one."""
    import dlfeed as dl
    arrays = {"x": np.arange(12, dtype=np.int32).reshape(4, 3), "x.npy": np.full((4, 3), 7, dtype=np.int32)}
    path = tmp_path / "both.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name in order:
            buf = io.BytesIO()
            np.save(buf, arrays[name])
            z.writestr(name, buf.getvalue())
    with np.load(path) as f:
        assert np.array_equal(f["x"], arrays["x"])
    loader = dl.Loader(str(path), fields=["x"], batch_size=4, strategy="sequential")
    (b,) = list(loader)
    assert np.array_equal(np.array(b["x"]), arrays["x"])


def test_valid_zips_dlfeed_does_not_read_are_invalid_argument_naming_the_member(tmp_path):
    # A member compressed with bzip2 or LZMA (np.load reads them), or a text file zipped beside the
    # arrays: a DataError ("file truncated" for the text), as if the file were damaged.
    import dlfeed as dl
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for method, name in [(zipfile.ZIP_BZIP2, "bzip2"), (zipfile.ZIP_LZMA, "LZMA")]:
        path = tmp_path / f"{name}.npz"
        with zipfile.ZipFile(path, "w", compression=method) as zf:
            b = io.BytesIO()
            np.save(b, x)
            zf.writestr("x.npy", b.getvalue())
        assert np.array_equal(np.load(path)["x"], x)
        with pytest.raises(dl.InvalidArgumentError, match=rf"member 'x.npy' stored \(0\) or deflated \(8\).*"
                                                          rf"compression method \d+ \({name}\)"):
            dl.Loader(path)
    path = tmp_path / "txt.npz"
    with zipfile.ZipFile(path, "w") as zf:
        b = io.BytesIO()
        np.save(b, x)
        zf.writestr("x.npy", b.getvalue())
        zf.writestr("notes.txt", "hello")
    with pytest.raises(dl.InvalidArgumentError, match=r"member 'notes.txt' \(5 bytes\) is not an NPY array"):
        dl.Loader(path, fields=["notes.txt"])
