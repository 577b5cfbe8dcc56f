# SPDX-License-Identifier: Apache-2.0
"""A bounded node-local cache (cache_limit) keeps pieces by their next use in the loader's known
order (a real SeaweedFS server, s3_harness.py): with an order that uses samples again, a piece
fetched is kept in place of the one used last when it is used before it, so an epoch sends fewer
ranged GETs than a cache that keeps what it kept first, and every sample arrives with its bytes."""
import numpy as np
import pytest

import dlfeed

BUCKET = "datasets"
OBJECTS = 20
VALUES = 51_200  # one float32 sample of 200 KiB per object: one 1 MiB piece each
PIECE_ROOM = 128 + VALUES * 4 + 4  # the .npy header, the values, the piece's CRC

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")


@pytest.fixture(scope="module")
def phases(s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    x = np.arange(OBJECTS * VALUES, dtype=np.float32).reshape(OBJECTS, 1, VALUES)
    for i in range(OBJECTS):
        np.save(root / f"s_{i:03d}.npy", x[i])
    s3_server.upload_dir(root, BUCKET, "phases/")
    return f"s3://{BUCKET}/phases", x[:, 0]


def epoch(loader, x):
    """One epoch, every sample checked against the values written; the ranged GETs and pieces let go."""
    before = dlfeed._dlfeed.s3_stats()
    ids = []
    for batch in loader:
        got = np.array(batch[0])
        np.testing.assert_array_equal(got, x[np.array(batch.sample_ids)])
        ids.extend(batch.sample_ids)
    after = dlfeed._dlfeed.s3_stats()
    return ids, after["gets"] - before["gets"], after["cache_let_go"] - before["cache_let_go"]


def test_pieces_used_sooner_take_the_place_of_those_used_later(s3_server, phases, tmp_path, monkeypatch):
    """Samples 0-9 three times, then 10-19 three times (a curriculum, `explicit` with repeats), in
    batches of 10, with room for 10 pieces: the cache lets 0-9 go for 10-19 once 0-9 are used no
    more, so each epoch fetches each object once (20 GETs); keeping what it kept first fetched
    10-19 three times (30 GETs an epoch)."""
    s3_server.apply_env(monkeypatch)
    monkeypatch.setenv("DLFEED_S3_CONNECTIONS", "1")  # the reads in order, one at a time
    url, x = phases
    order = list(range(10)) * 3 + list(range(10, 20)) * 3
    cache = tmp_path / "cache"
    loader = dlfeed.Loader(url, batch_size=10, strategy="explicit", indices=order, resident="off", io_engines=1,
                           cache_dir=cache, cache_limit=10 * PIECE_ROOM + 100)
    for e in range(3):
        ids, gets, let_go = epoch(loader, x)
        assert ids == order
        if e == 0:
            # The first 10 objects whose headers create read were kept then (those of 0-9, but for a
            # header read of another first): 10-19 are fetched, and 0-9 that were not kept.
            assert 10 <= gets <= 12 and let_go == gets
        else:
            assert (gets, let_go) == (20, 20), f"epoch {e}"
        kept = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and p.name != "id")
        assert kept <= 10 * PIECE_ROOM + 100
    loader.close()
    # A new loader (a new run) of the same order finds 10-19 kept: they are let go for 0-9, used first.
    loader = dlfeed.Loader(url, batch_size=10, strategy="explicit", indices=order, resident="off", io_engines=1,
                           cache_dir=cache, cache_limit=10 * PIECE_ROOM + 100)
    ids, gets, let_go = epoch(loader, x)
    loader.close()
    assert ids == order and gets == 20 and let_go == 20


def test_an_order_that_uses_each_sample_once_keeps_what_it_kept(s3_server, phases, tmp_path, monkeypatch):
    """A shuffled epoch uses each piece once: nothing kept is let go for a piece used no more this
    epoch, and each epoch fetches only what is not kept."""
    s3_server.apply_env(monkeypatch)
    url, x = phases
    loader = dlfeed.Loader(url, batch_size=4, strategy="global_shuffle", seed=3, resident="off",
                           cache_dir=tmp_path / "cache", cache_limit=8 * PIECE_ROOM + 100)
    for _ in range(3):  # create kept 8 objects as it read their headers
        ids, gets, let_go = epoch(loader, x)
        assert sorted(ids) == list(range(OBJECTS))
        assert gets == OBJECTS - 8 and let_go == 0
    loader.close()


def test_a_shuffled_order_of_small_samples_lets_no_piece_go(s3_server, tmp_path, monkeypatch):
    """Samples of 32 KiB, 32 to a 1 MiB piece: a shuffled epoch uses each piece in many batches, but
    each sample once, so nothing is ranked by next use (which let pieces the next epoch reads go for
    pieces read once more in this one, fetching 1.4 times the set each epoch instead of half); the
    cache at half the set keeps what it kept, and later epochs fetch about the other half."""
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "small"
    root.mkdir()
    x = np.arange(8 * 32 * 8192, dtype=np.float32).reshape(8, 32, 8192)
    for i in range(8):
        np.save(root / f"s_{i}.npy", x[i])  # 1 MiB + 128 bytes: two pieces
    s3_server.upload_dir(root, BUCKET, "small/")
    total = sum(p.stat().st_size for p in root.iterdir())
    loader = dlfeed.Loader(f"s3://{BUCKET}/small", batch_size=8, strategy="global_shuffle", seed=5, resident="off",
                           cache_dir=tmp_path / "cache", cache_limit=total // 2)
    flat = x.reshape(256, 8192)
    epoch(loader, flat)
    for _ in range(2):
        before = dlfeed._dlfeed.s3_stats()
        ids, _, let_go = epoch(loader, flat)
        fetched = dlfeed._dlfeed.s3_stats()["bytes"] - before["bytes"]
        assert sorted(ids) == list(range(256)) and let_go == 0
        assert fetched <= 0.6 * total, f"an epoch fetched {fetched / total:.2f} of the set"
    loader.close()
