# SPDX-License-Identifier: Apache-2.0
"""What a server or gateway answers that would change a dataset without a word: a listing page cut short
under a matching length (its last keys dropped), and an object rewritten at another size when the listing
gives no ETag (ranges of the new object read with the old index). Each is asked again or an error naming the
object; never fewer samples or other bytes. SeaweedFS behind the harness's proxy."""
import html

import numpy as np
import pytest

import dlfeed

BUCKET = "integrity"


def upload_arrays(s3_server, tmp_path, prefix, count, rows=8):
    """COUNT NPY objects of ROWS x 16 int32 under PREFIX (object i's row r holds i * 1000 + r); returns
    the arrays and the boto3 client."""
    client = s3_server.client()
    s3_server.ensure_bucket(BUCKET, client)
    arrays = []
    for i in range(count):
        a = (np.arange(rows, dtype=np.int32)[:, None] + i * 1000).repeat(16, axis=1)
        path = tmp_path / f"{i}.npy"
        np.save(path, a)
        client.upload_file(str(path), BUCKET, f"{prefix}/part_{i}.npy")
        arrays.append(a)
    return arrays, client


def listing_xml(client, prefix, etags=True):
    """The ListObjectsV2 document a server gives for PREFIX in one page (with or without ETags)."""
    got = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
    items = "".join(
        f"<Contents><Key>{html.escape(o['Key'])}</Key><Size>{o['Size']}</Size>"
        + (f"<ETag>{html.escape(o['ETag'])}</ETag>" if etags else "") + "</Contents>" for o in got)
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{BUCKET}</Name><Prefix>{prefix}</Prefix>'
            f"<KeyCount>{len(got)}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{items}"
            "</ListBucketResult>").encode()


def rows_of(loader):
    return np.concatenate([np.array(b[0]) for b in loader])


@pytest.mark.parametrize("cut", ["half", "tag", "key count"])
def test_a_listing_page_cut_short_is_asked_again_and_then_an_error(s3_server, s3_proxy, tmp_path, monkeypatch,
                                                                   cut):
    # A page whose body stopped early under a Content-Length that matched it was taken whole: the keys after
    # the cut were not in the dataset (2 of 6 files read, no error).
    arrays, client = upload_arrays(s3_server, tmp_path, "cut", 6)
    whole = listing_xml(client, "cut/")
    if cut == "half":
        short = whole[: len(whole) // 2]
    elif cut == "tag":
        short = whole[: whole.rindex(b"<Contents>")]  # ends between entries: no end tag
    else:
        short = whole.replace(b"<KeyCount>6</KeyCount>", b"<KeyCount>7</KeyCount>")
    answers = []

    def listing(target):
        answers.append(target)
        return short if len(answers) == 1 else None  # the first answer cut, then the server's own

    proxy = s3_proxy(listing_body=listing)
    proxy.apply_env(monkeypatch)
    loader = dlfeed.Loader(f"s3://{BUCKET}/cut/", batch_size=8, strategy="sequential")
    assert len(answers) == 2, "asked again"
    np.testing.assert_array_equal(rows_of(loader), np.concatenate(arrays))
    proxy.configure(listing_body=lambda target: short)
    with pytest.raises(dlfeed.DataError, match=r"listing page 1 .*\(3 tries\): the listing would be incomplete"):
        dlfeed.Loader(f"s3://{BUCKET}/cut/", batch_size=8)


@pytest.mark.parametrize("change", ["grown", "shrunk"])
def test_an_object_rewritten_at_another_size_is_an_error_without_an_etag(s3_server, s3_proxy, tmp_path,
                                                                        monkeypatch, change):
    # With no ETag in the listing (some gateways), ranges of an object rewritten larger after the loader
    # indexed it were read as the old object's samples: 40 samples of other bytes and no error. Every ranged
    # answer says the object's size (Content-Range: bytes a-b/SIZE): another one than listed is refused.
    arrays, client = upload_arrays(s3_server, tmp_path, "resize", 3)
    proxy = s3_proxy(listing_body=lambda target: listing_xml(client, "resize/", etags=False))
    proxy.apply_env(monkeypatch)
    loader = dlfeed.Loader(f"s3://{BUCKET}/resize/", batch_size=4, strategy="sequential", resident="off")
    rows = 16 if change == "grown" else 6
    new = np.full((rows, 16), -1, np.int32)
    np.save(tmp_path / "new.npy", new)
    client.upload_file(str(tmp_path / "new.npy"), BUCKET, "resize/part_1.npy")
    delivered = []
    with pytest.raises(dlfeed.DataError, match=r"part_1.npy.*the object is now \d+ bytes, listed with \d+"):
        for batch in loader:
            delivered.append(np.array(batch[0]))
    got = np.concatenate(delivered) if delivered else np.zeros((0, 16), np.int32)
    np.testing.assert_array_equal(got, np.concatenate(arrays)[: len(got)])  # what came before is the old bytes
    assert len(got) == 8, "part_0's samples, then the error at part_1's first read"


def test_a_cache_bound_just_above_the_dataset_keeps_it_all(s3_server, tmp_path, monkeypatch):
    # Two connections fetching the same piece at once both kept it (the second replacing the first) and
    # both counted it against cache_limit, and a read near the bound asked room for its whole span of pieces,
    # kept ones too: with the bound just above the dataset, 8-22% of it stayed out of the cache and was
    # fetched again every epoch.
    s3_server.apply_env(monkeypatch)
    client = s3_server.client()
    s3_server.ensure_bucket(BUCKET, client)
    want = []
    for i in range(6):
        a = (np.arange(48, dtype=np.int32)[:, None] + i * 48).repeat(16384, axis=1)  # 48 rows of 64 KiB
        np.save(tmp_path / f"{i}.npy", a)
        client.upload_file(str(tmp_path / f"{i}.npy"), BUCKET, f"bound/x_{i}.npy")
        want.append(a)
    total = sum(o["Size"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="bound/")["Contents"])
    loader = dlfeed.Loader(f"s3://{BUCKET}/bound/", batch_size=8, resident="off", strategy="global_shuffle",
                           seed=1, cache_dir=tmp_path / "cache", cache_limit=total + (256 << 10))
    ids = []
    for b in loader:
        ids += list(b.sample_ids)
        np.testing.assert_array_equal(np.array(b[0])[:, 0], np.asarray(b.sample_ids, np.int32))
    assert sorted(ids) == list(range(288))
    before = dlfeed._dlfeed.s3_stats()
    assert sum(len(b) for b in loader) == 288
    fetched = dlfeed._dlfeed.s3_stats()["bytes"] - before["bytes"]
    assert fetched == 0, f"the second epoch fetched {fetched} of {total} bytes again"


def test_a_folder_in_place_of_a_piece_is_replaced_by_the_piece(s3_server, tmp_path, monkeypatch):
    # A folder (or any non-file) where a piece goes: a damaged piece, fetched again and kept in its
    # place, not a name the cache can never use again (found by outside testing).
    s3_server.apply_env(monkeypatch)
    arrays, _ = upload_arrays(s3_server, tmp_path, "folder-piece", 2)
    kw = dict(batch_size=4, resident="off", cache_dir=tmp_path / "cache")
    loader = dlfeed.Loader(f"s3://{BUCKET}/folder-piece/", **kw)
    assert sum(len(b) for b in loader) == 16
    loader.close()
    piece = sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id")[0]
    piece.unlink()
    (piece / "junk").mkdir(parents=True)
    for _ in range(2):
        loader = dlfeed.Loader(f"s3://{BUCKET}/folder-piece/", **kw)
        got = np.concatenate([np.array(b[0]) for b in loader])
        loader.close()
        np.testing.assert_array_equal(got, np.concatenate(arrays))  # sequential: in the files' order
    assert piece.is_file()


def test_a_cache_folder_emptied_by_hand_fills_again(s3_server, tmp_path, monkeypatch):
    # A later loader of the same folder and bound took over the first one's count of what it kept:
    # with the folder deleted in between, it never kept a piece again (found by outside testing).
    import shutil
    s3_server.apply_env(monkeypatch)
    arrays, _ = upload_arrays(s3_server, tmp_path, "emptied", 4, rows=64)  # 4 KiB objects
    kw = dict(batch_size=8, resident="off", cache_dir=tmp_path / "cache", cache_limit=12 << 10)

    def pieces():
        return [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id"]

    loader = dlfeed.Loader(f"s3://{BUCKET}/emptied/", **kw)
    assert sum(len(b) for b in loader) == 256
    loader.close()
    assert len(pieces()) == 2  # 12 KiB: two objects and their CRCs
    shutil.rmtree(tmp_path / "cache")
    loader = dlfeed.Loader(f"s3://{BUCKET}/emptied/", **kw)
    got = np.concatenate([np.array(b[0]) for b in loader])
    loader.close()
    np.testing.assert_array_equal(got, np.concatenate(arrays))
    assert len(pieces()) == 2
