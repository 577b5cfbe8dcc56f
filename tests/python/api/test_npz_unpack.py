# SPDX-License-Identifier: Apache-2.0
"""Deflated NPZ members and DLIO-layout arrays are unpacked once
(LoaderOptions::unpack, docs/formats.md): numpy writes the files, the loader's
samples are numpy's, every sample exactly once, and the loader's own counters
show each member or array read once (bytes_read) instead of once per sample."""
import struct
import zlib

import numpy as np
import pytest

import dlfeed


def epoch_samples(loader, field=0):
    """{sample id: sample} over one epoch, checking each id comes once."""
    got = {}
    for batch in loader:
        for i, sid in enumerate(batch.sample_ids.tolist()):
            assert sid not in got
            got[sid] = np.array(batch[field][i], copy=True)
    return got


def savez_compressed_files(root, files, per_file, shape, seed=0):
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    xs = []
    for f in range(files):
        x = rng.standard_normal((per_file, *shape)).astype(np.float32)
        np.savez_compressed(root / f"part_{f:02d}.npz", x=x, y=np.arange(per_file, dtype=np.int64) + f * per_file)
        xs.append(x)
    return np.concatenate(xs)


def member_compressed_size(path, name="x.npy"):
    import zipfile
    with zipfile.ZipFile(path) as z:
        return z.getinfo(name).compress_size


@pytest.mark.parametrize("strategy", ["sequential", "global_shuffle"])
def test_savez_compressed_is_inflated_once_per_member(tmp_path, strategy):
    x = savez_compressed_files(tmp_path / "d", files=3, per_file=40, shape=(16, 16))
    compressed = sum(member_compressed_size(p) for p in sorted((tmp_path / "d").glob("*.npz")))
    loader = dlfeed.Loader(tmp_path / "d", fields=["x", "y"], batch_size=7, strategy=strategy, seed=3)
    s = loader.stats()
    assert s["unpacked_bytes"] >= x.nbytes and "unpacked: 6 " in s["unpacked_reason"], s["unpacked_reason"]
    got = {}
    for batch in loader:
        np.testing.assert_array_equal(batch[1], batch.sample_ids)  # y: the id numpy wrote
        for i, sid in enumerate(batch.sample_ids.tolist()):
            assert sid not in got
            got[sid] = np.array(batch[0][i], copy=True)
    assert sorted(got) == list(range(120))
    for sid, v in got.items():
        np.testing.assert_array_equal(v, x[sid])
    s = loader.stats()
    y_compressed = sum(member_compressed_size(p, "y.npy") for p in sorted((tmp_path / "d").glob("*.npz")))
    # Each member read once: bytes read are the compressed members, not 40x them.
    assert s["bytes_read"] == compressed + y_compressed, s
    assert s["bytes_read"] < s["bytes_delivered"]
    # Each epoch starts afresh: a second one reads each member once more.
    assert len(epoch_samples(loader)) == 120
    assert loader.stats()["bytes_read"] == 2 * s["bytes_read"]


def test_unpack_off_reads_the_member_per_sample(tmp_path):
    """The route this replaces, still there with unpack="off": every sample
    reads its whole member (the quadratic cost the default avoids)."""
    x = savez_compressed_files(tmp_path / "d", files=1, per_file=24, shape=(8, 8))
    compressed = member_compressed_size(tmp_path / "d" / "part_00.npz")
    loader = dlfeed.Loader(tmp_path / "d", fields="x", batch_size=1, strategy="global_shuffle", unpack="off")
    assert loader.stats()["unpacked_bytes"] == 0 and "unpack is off" in loader.stats()["unpacked_reason"]
    got = epoch_samples(loader)
    for sid, v in got.items():
        np.testing.assert_array_equal(v, x[sid])
    assert loader.stats()["bytes_read"] == 24 * compressed


def dlio_files(root, fmt, files, per_file, shape, dtype="uint8", seed=0):
    """As DLIO's generator writes them: samples on the last axis, named
    img_{i}_of_{n} in train/ (np.savez: x, y=zeros; or np.save)."""
    rng = np.random.default_rng(seed)
    train = root / "train"
    train.mkdir(parents=True)
    xs = []
    for f in range(files):
        rec = rng.integers(0, 255, size=(*shape, per_file)).astype(dtype)
        path = train / f"img_{f}_of_{files}.{fmt}"
        if fmt == "npz":
            np.savez(path, x=rec, y=np.zeros(per_file, dtype=np.int64))
        else:
            np.save(path, rec)
        xs.extend(rec[..., k] for k in range(per_file))
    return train, xs


@pytest.mark.parametrize("fmt", ["npz", "npy"])
@pytest.mark.parametrize("resident", ["auto", "off"])
def test_dlio_layout_is_read_once_and_gathered(tmp_path, fmt, resident):
    train, xs = dlio_files(tmp_path, fmt, files=4, per_file=32, shape=(24, 20))
    loader = dlfeed.Loader(train, batch_size=8, strategy="global_shuffle", seed=1, resident=resident)
    s = loader.stats()
    assert "unpacked: 4 " in s["unpacked_reason"], s["unpacked_reason"]
    # Held in memory, the arrays are gathered from the held bytes: nothing more is kept.
    assert (s["unpacked_bytes"] == 0) == (resident == "auto"), s
    for epoch in range(2):
        got = epoch_samples(loader)
        assert sorted(got) == list(range(128))
        for sid, v in got.items():
            assert v.shape == (24, 20)
            np.testing.assert_array_equal(v, xs[sid])
        s = loader.stats()
        # Each array read once per epoch (per sample, each would read nearly all of it).
        assert s["bytes_read"] == (epoch + 1) * 4 * 32 * 24 * 20, s
        assert s["bytes_read"] / s["bytes_delivered"] <= 1.1, s


def test_dlio_layout_over_the_budget_is_read_per_sample(tmp_path):
    """Arrays that do not fit in half the memory budget are read per sample as
    before (each sample's strided span), and still right."""
    train, xs = dlio_files(tmp_path, "npy", files=2, per_file=16, shape=(64, 64))
    # 64 KiB per file; a budget of 96 KiB leaves room (48 KiB) for none of them.
    loader = dlfeed.Loader(train, batch_size=4, strategy="global_shuffle", memory_budget=96 << 10, resident="off")
    s = loader.stats()
    assert s["unpacked_bytes"] == 0 and "read per sample" in s["unpacked_reason"], s["unpacked_reason"]
    got = epoch_samples(loader)
    for sid, v in got.items():
        np.testing.assert_array_equal(v, xs[sid])
    s = loader.stats()
    assert s["bytes_read"] > 1.5 * s["bytes_delivered"], s
    # With room for one of the two, that one is unpacked and the other read per sample.
    loader = dlfeed.Loader(train, batch_size=4, strategy="global_shuffle", memory_budget=160 << 10, resident="off")
    assert "unpacked: 1 " in loader.stats()["unpacked_reason"] and "1 more read per sample" in \
        loader.stats()["unpacked_reason"], loader.stats()["unpacked_reason"]
    got = epoch_samples(loader)
    for sid, v in got.items():
        np.testing.assert_array_equal(v, xs[sid])


def test_corrupt_deflate_stream_names_file_and_offset(tmp_path):
    x = savez_compressed_files(tmp_path / "d", files=1, per_file=16, shape=(32, 32))
    path = tmp_path / "d" / "part_00.npz"
    import zipfile
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("x.npy")
    raw = bytearray(path.read_bytes())
    # Past the local header: flip bytes in the middle of the deflate stream.
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    data_at = info.header_offset + 30 + name_len + extra_len
    mid = data_at + info.compress_size // 2
    raw[mid:mid + 8] = bytes(b ^ 0x5A for b in raw[mid:mid + 8])
    path.write_bytes(bytes(raw))
    loader = dlfeed.Loader(path, fields="x", batch_size=4)
    with pytest.raises(dlfeed.Error) as e:
        epoch_samples(loader)
    msg = str(e.value)
    assert str(path) in msg and "offset" in msg, msg
    del x


def write_zip(path, name, data, method_data, crc, size):
    """A one-member zip with the given (possibly bad) deflate bytes."""
    fname = name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(method_data), size, len(fname), 0)
    body = local + fname + method_data
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(method_data), size,
                          len(fname), 0, 0, 0, 0, 0, 0) + fname
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(body), 0)
    path.write_bytes(body + central + end)


def test_truncated_deflate_member_names_file_and_offset(tmp_path):
    """A member whose deflate stream stops short of its end (the header is
    there, the data cut): an error naming the file and offset, no hang."""
    import io
    arr = np.arange(64 * 256, dtype=np.float32).reshape(64, 256)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr)
    npy = buf.getvalue()
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    cut = c.compress(npy[:len(npy) // 3]) + c.flush(zlib.Z_SYNC_FLUSH)  # no final block
    path = tmp_path / "cut.npz"
    write_zip(path, "x.npy", npy, cut, zlib.crc32(npy), len(npy))
    loader = dlfeed.Loader(path, fields="x", batch_size=4, strategy="global_shuffle")
    assert "unpacked: 1 " in loader.stats()["unpacked_reason"]
    with pytest.raises(dlfeed.Error) as e:
        epoch_samples(loader)
    msg = str(e.value)
    assert str(path) in msg and "offset" in msg and "cut short" in msg, msg


@pytest.mark.parametrize("container", ["npy", "npz", "npz_compressed"])
def test_fortran_order_on_the_first_axis_is_unpacked(tmp_path, container):
    """A Fortran-ordered array's first-axis samples are strided too: unpacked
    and gathered into C order, as numpy indexes them."""
    arr = np.asfortranarray(np.random.default_rng(2).standard_normal((30, 6, 5)).astype("<f8"))
    path = tmp_path / f"f.{container.split('_')[0]}"
    if container == "npy":
        np.save(path, arr)
    else:
        (np.savez_compressed if container == "npz_compressed" else np.savez)(path, x=arr)
    loader = dlfeed.Loader(path, fields="x" if container != "npy" else None, axis="first", batch_size=4,
                           strategy="global_shuffle", resident="off")
    assert "unpacked: 1 " in loader.stats()["unpacked_reason"], loader.stats()["unpacked_reason"]
    got = epoch_samples(loader)
    assert sorted(got) == list(range(30))
    for sid, v in got.items():
        np.testing.assert_array_equal(v, arr[sid])
    assert loader.stats()["bytes_read"] <= path.stat().st_size


def test_a_file_truncated_between_epochs_is_read_again_and_refused(tmp_path):
    """Unpacked arrays are dropped at each epoch's start: a file truncated
    after epoch 0 is read again at its next load (resident="off") and the
    short read is an error naming it, not the previous epoch's copy."""
    train, xs = dlio_files(tmp_path / "a", "npy", files=2, per_file=8, shape=(6, 5))
    loader = dlfeed.Loader(train, batch_size=4, strategy="global_shuffle", resident="off")
    assert "unpacked: 2 " in loader.stats()["unpacked_reason"]
    for sid, v in epoch_samples(loader).items():
        np.testing.assert_array_equal(v, xs[sid])
    victim = train / "img_1_of_2.npy"
    import os
    os.truncate(victim, 200)
    with pytest.raises(dlfeed.Error) as e:
        epoch_samples(loader)
    # Named at the next epoch's start (the descriptor held open sees the new size), or
    # by the short read that names the offset.
    msg = str(e.value)
    assert str(victim) in msg and ("offset" in msg or "changed in place" in msg), msg
