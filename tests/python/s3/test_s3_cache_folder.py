# SPDX-License-Identifier: Apache-2.0
"""What the node-local cache's folder holds under cache_limit when a process is killed while keeping a
piece, when a version's `id` file is lost or damaged by hand, and when two loaders of one process read
through the same folder and bound: every sample's bytes right, and the pieces under the bound."""
import os
import subprocess
import sys
import time

import numpy as np

import dlfeed

BUCKET = "cachefolder"
ROW = 64 << 10  # 64 KiB rows: 16 to a piece


def upload(s3_server, tmp_path, prefix, count, rows=32):
    """COUNT NPY objects of ROWS rows of 64 KiB (int32; object i's row r holds i * 1000 + r) under PREFIX;
    returns the arrays (2 MiB and a header each: 3 pieces)."""
    client = s3_server.client()
    s3_server.ensure_bucket(BUCKET, client)
    arrays = []
    for i in range(count):
        a = (np.arange(rows, dtype=np.int32)[:, None] + i * 1000).repeat(ROW // 4, axis=1)
        np.save(tmp_path / f"{prefix}{i}.npy", a)
        client.upload_file(str(tmp_path / f"{prefix}{i}.npy"), BUCKET, f"{prefix}/part_{i}.npy")
        arrays.append(a)
    return arrays


def pieces(cache):
    """Bytes of the pieces under CACHE (what counts against cache_limit), and every other file's name."""
    files = [p for p in cache.rglob("*") if p.is_file()]
    return (sum(p.stat().st_size for p in files if p.name.isdigit()),
            sorted(p.name for p in files if not p.name.isdigit() and p.name != "id"))


def check(loader, arrays):
    n = 0
    for b in loader:
        x = np.array(b[0])
        for ids, row in zip(b.sample_ids, x):
            assert row[0] == (ids // len(arrays[0])) * 1000 + ids % len(arrays[0]) and (row == row[0]).all()
        n += len(x)
    assert n == sum(len(a) for a in arrays)


def test_two_loaders_of_one_process_share_the_bound(s3_server, tmp_path, monkeypatch):
    # Each loader counted the folder when it was made and kept up to the bound less that: a train and a
    # val loader read in turn held 1.5 times cache_limit (found by outside testing).
    s3_server.apply_env(monkeypatch)
    train, val = upload(s3_server, tmp_path, "train", 4), upload(s3_server, tmp_path, "val", 4)
    limit = 9 << 20  # of 24 MiB and more: neither set fits
    kw = dict(batch_size=8, resident="off", strategy="global_shuffle", cache_dir=tmp_path / "cache",
              cache_limit=limit)
    a = dlfeed.Loader(f"s3://{BUCKET}/train/", seed=1, **kw)
    b = dlfeed.Loader(f"s3://{BUCKET}/val/", seed=2, **kw)
    for _ in range(3):
        check(a, train)
        check(b, val)
        assert pieces(tmp_path / "cache")[0] <= limit
    assert pieces(tmp_path / "cache")[0] > limit // 2  # both kept: one count, not none


def test_a_piece_left_half_written_by_a_killed_process_is_removed(s3_server, tmp_path, monkeypatch):
    # Its NAME.tmp.PID.THREAD file was never renamed, counted or removed: each kill left up to a piece
    # per connection over the bound, for good (found by outside testing).
    s3_server.apply_env(monkeypatch)
    arrays = upload(s3_server, tmp_path, "killed", 2)
    cache = tmp_path / "cache"
    kw = dict(batch_size=8, resident="off", cache_dir=cache, cache_limit=64 << 20)
    check(dlfeed.Loader(f"s3://{BUCKET}/killed/", **kw), arrays)
    folder = next(p.parent for p in cache.rglob("id"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a PID of no process now
    dead_tmp = folder / f"7.tmp.{dead.pid}.140000000000"  # its process gone, two minutes ago
    dead_tmp.write_bytes(b"\0" * 4096)
    os.utime(dead_tmp, (time.time() - 120,) * 2)
    old = folder / f"8.tmp.{os.getpid()}.140000000001"  # this process's PID, but two hours old
    old.write_bytes(b"\0" * 4096)
    os.utime(old, (time.time() - 7200,) * 2)
    live = folder / f"9.tmp.{os.getpid()}.140000000002"  # being written: left alone
    live.write_bytes(b"\0" * 4096)
    # Its PID gone but just written: maybe a process of another PID namespace (a container's), left alone.
    fresh = folder / f"6.tmp.{dead.pid}.140000000003"
    fresh.write_bytes(b"\0" * 4096)
    check(dlfeed.Loader(f"s3://{BUCKET}/killed/", **kw), arrays)
    assert pieces(cache)[1] == sorted([live.name, fresh.name])


def test_a_version_folder_without_its_id_or_with_another_is_removed(s3_server, tmp_path, monkeypatch):
    # Its pieces were not counted at open, yet read once the id was written again (the folder held twice
    # the bound); with a damaged id the object was never kept again and its pieces never counted.
    s3_server.apply_env(monkeypatch)
    arrays = upload(s3_server, tmp_path, "ids", 3)
    cache = tmp_path / "cache"
    limit = 9 << 20  # all 3 objects (9 pieces)
    kw = dict(batch_size=8, resident="off", cache_dir=cache, cache_limit=limit)
    check(dlfeed.Loader(f"s3://{BUCKET}/ids/", **kw), arrays)
    full, _ = pieces(cache)
    ids = sorted(cache.rglob("id"))
    assert len(ids) == 3
    ids[0].unlink()  # lost, a minute ago and more
    os.utime(ids[0].parent, (time.time() - 120,) * 2)
    ids[1].write_text(ids[1].read_text().replace("dlfeed", "dlfeeD"))  # damaged
    before = dlfeed._dlfeed.s3_stats()
    loader = dlfeed.Loader(f"s3://{BUCKET}/ids/", **kw)
    assert dlfeed._dlfeed.s3_stats()["cache_damaged"] - before["cache_damaged"] == 2
    check(loader, arrays)
    assert pieces(cache)[0] == full and len(list(cache.rglob("id"))) == 3  # the two kept again, once
    # Damaged while a loader reads: its pieces still check out (their CRCs are of the version's id as
    # listed, not of the file), and the next loader's open removes the folder.
    ids = sorted(cache.rglob("id"))
    ids[2].write_text("something else\n")
    check(loader, arrays)
    loader.close()
    check(dlfeed.Loader(f"s3://{BUCKET}/ids/", **kw), arrays)
    assert pieces(cache)[0] == full and all(p.read_text().startswith("dlfeed object cache") for p in ids)


def test_folders_the_cache_did_not_write_are_left_alone(s3_server, tmp_path, monkeypatch):
    # A user's folder named like a version's (or 33 dashes) with an `id` or none, other files in it, and
    # an earlier release's version folder: none of them removed (a reviewer's reproducer deleted both).
    s3_server.apply_env(monkeypatch)
    arrays = upload(s3_server, tmp_path, "alone", 1)
    cache = tmp_path / "cache"
    theirs = [cache / "0123456789abcdef-0123456789abcdef", cache / ("-" * 33), cache / "fedcba9876543210-0123456789abcdef",
              cache / "fedcba9876543210-fedcba9876543210"]
    for d in theirs:
        d.mkdir(parents=True)
        (d / "results.csv").write_text("a,b\n")
        os.utime(d, (time.time() - 120,) * 2)
    (theirs[0] / "id").write_text("not ours\n")
    (theirs[2] / "id").write_text("dlfeed object cache 1\ns3://b/k\n\"e\"\n10\n")  # another release's
    (theirs[3] / "id").write_text("dlfeed object cache 20\ns3://b/k\n\"e\"\n10\n")  # a later release's
    for d in theirs[2:]:
        (d / "results.csv").unlink()
        (d / "0").write_bytes(b"\0" * 14)
    before = dlfeed._dlfeed.s3_stats()
    check(dlfeed.Loader(f"s3://{BUCKET}/alone/", batch_size=8, resident="off", cache_dir=cache,
                        cache_limit=64 << 20), arrays)
    assert dlfeed._dlfeed.s3_stats()["cache_damaged"] == before["cache_damaged"]
    assert (theirs[0] / "results.csv").exists() and (theirs[1] / "results.csv").exists()
    assert (theirs[2] / "0").exists() and (theirs[3] / "0").exists()


def test_a_rewritten_object_s_old_version_is_removed_when_the_new_one_is_read(s3_server, tmp_path, monkeypatch):
    # Its pieces were never read again yet held the bound: a full cache never took the new version's.
    s3_server.apply_env(monkeypatch)
    arrays = upload(s3_server, tmp_path, "rewritten", 4)
    cache = tmp_path / "cache"
    kw = dict(batch_size=8, resident="off", cache_dir=cache, cache_limit=5 << 20)  # 4 x 3 pieces of 2 MiB + 128
    check(dlfeed.Loader(f"s3://{BUCKET}/rewritten/", **kw), arrays)
    full, _ = pieces(cache)
    assert len(list(cache.rglob("id"))) == 4 and (4 << 20) < full <= kw["cache_limit"]
    client = s3_server.client()
    for i in range(4):  # new bytes, the same sizes: row r of object i holds i * 1000 + r + 7
        arrays[i] = arrays[i] + 7
        np.save(tmp_path / f"new{i}.npy", arrays[i])
        client.upload_file(str(tmp_path / f"new{i}.npy"), BUCKET, f"rewritten/part_{i}.npy")
    before = dlfeed._dlfeed.s3_stats()
    loader = dlfeed.Loader(f"s3://{BUCKET}/rewritten/", **kw)
    n = 0
    for b in loader:
        for sid, row in zip(b.sample_ids, np.array(b[0])):
            assert row[0] == (sid // 32) * 1000 + sid % 32 + 7
        n += len(b)
    assert n == 128
    after = dlfeed._dlfeed.s3_stats()
    assert after["cache_old_versions"] - before["cache_old_versions"] == 4
    assert len(list(cache.rglob("id"))) == 4 and pieces(cache)[0] == full  # the new versions, as many
    before = after
    assert sum(len(b) for b in loader) == 128  # a second epoch: from the cache as much
    after = dlfeed._dlfeed.s3_stats()
    assert after["cache_bytes"] - before["cache_bytes"] > 1 << 20 and pieces(cache)[0] == full  # kept: not 0


def test_a_cache_limit_without_a_cache_dir_is_refused(s3_server, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    upload(s3_server, tmp_path, "nodir", 1)
    try:
        dlfeed.Loader(f"s3://{BUCKET}/nodir/", batch_size=8, cache_limit=1 << 20)
    except dlfeed.InvalidArgumentError as e:
        assert "cache_limit 1048576 bounds the folder of cache_dir, which is not given" in str(e)
    else:
        raise AssertionError("cache_limit without cache_dir was taken and not used")
