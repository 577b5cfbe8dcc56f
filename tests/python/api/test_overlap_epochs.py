# SPDX-License-Identifier: Apache-2.0
"""overlap_epochs (issue 28, AU at epoch boundaries): epoch e + 1 is read once
epoch e is all read, and start_epoch(e + 1) adopts it. The files are written by
h5py and numpy; every check is on counts and sample ids, never on time."""
import time

import h5py
import numpy as np
import pytest

import dlfeed

N_FILES, PER, BATCH = 3, 40, 8  # 15 batches per epoch


@pytest.fixture()
def data(tmp_path):
    rng = np.random.default_rng(7)
    first = 0
    for k in range(N_FILES):
        with h5py.File(tmp_path / f"part_{k}.h5", "w") as h:
            h.create_dataset("x", data=rng.integers(0, 255, (PER, 4, 5), dtype=np.uint8))
            h.create_dataset("id", data=np.arange(first, first + PER, dtype=np.int64))
        first += PER
    return tmp_path


def make(data, overlap, **kw):
    return dlfeed.Loader(data, fields=["x", "id"], batch_size=BATCH, strategy="global_shuffle", seed=11,
                         overlap_epochs=overlap, prefetch="depth:4", **kw)


def ids_of(batches):
    out = []
    for b in batches:
        ids = b.sample_ids.tolist()
        assert np.asarray(b["id"]).tolist() == ids  # the data is the samples the ids say
        out += ids
    return out


def wait_for(cond, seconds=60.0):
    """Polls cond() until true (the pipeline thread gets there on its own); False after `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_the_next_epoch_is_read_before_the_last_batch_of_this_one_is_consumed(data):
    L = make(data, True)
    n = L.batches_per_epoch
    it = L.iter_epoch(0)
    first = [next(it) for _ in range(n)]  # every batch of epoch 0: the end is not yet taken
    # epoch 0's batches are all handed out: what the look-ahead holds now is epoch 1's.
    assert wait_for(lambda: L.stats()["lookahead_batches"] >= 1), L.stats()
    assert next(it, None) is None
    second = list(L.iter_epoch(1))
    assert [b.epoch for b in second] == [1] * n
    fresh = make(data, False)
    assert ids_of(first) == ids_of(fresh.iter_epoch(0))
    assert ids_of(second) == ids_of(fresh.iter_epoch(1))  # adopted: the same order as a fresh epoch 1
    assert sorted(ids_of(second)) == list(range(N_FILES * PER))


def test_without_overlap_nothing_is_read_between_epochs(data):
    L = make(data, False)
    for _ in L.iter_epoch(0):
        pass
    time.sleep(0.2)  # would the pipeline go on, it would have admitted a batch by now
    assert L.stats()["lookahead_batches"] == 0


def test_another_epoch_than_the_one_read_ahead_cancels_it(data):
    L = make(data, True)
    list(L.iter_epoch(0))
    assert wait_for(lambda: L.stats()["lookahead_batches"] >= 1)  # epoch 1 is being read
    got = ids_of(L.iter_epoch(3))
    assert got == ids_of(make(data, False).iter_epoch(3))
    # And the next one after that adopts epoch 4 as usual.
    assert ids_of(L.iter_epoch(4)) == ids_of(make(data, False).iter_epoch(4))


def test_state_in_an_adopted_epoch_and_a_restore_pending_are_kept(data):
    L = make(data, True)
    list(L.iter_epoch(0))
    it = L.iter_epoch(1)  # adopted
    head = [next(it) for _ in range(5)]
    state = L.state()
    s = dlfeed.decode_state(state)
    assert (s["epoch"], s["position"]) == (1, 5 * BATCH)
    rest = list(it)
    # A fresh loader restored there gives the same rest.
    R = make(data, False)
    R.restore(state)
    assert ids_of(R) == ids_of(rest)
    # A restore pending for the epoch read ahead: that epoch is not adopted, the
    # restored position is what comes.
    M = make(data, True)
    list(M.iter_epoch(0))
    assert wait_for(lambda: M.stats()["lookahead_batches"] >= 1)
    M.restore(state)
    assert ids_of(M) == ids_of(rest)
    assert ids_of(head) + ids_of(rest) == ids_of(make(data, False).iter_epoch(1))


def test_iter_epochs_is_the_epochs_one_after_another(data):
    L = make(data, None)
    got = list(L.iter_epochs(count=3))
    assert [b.epoch for b in got] == [e for e in range(3) for _ in range(L.batches_per_epoch)]
    fresh = make(data, False)
    want = [i for e in range(3) for i in ids_of(fresh.iter_epoch(e))]
    assert ids_of(got) == want
    assert L.epoch == 3  # the next `for batch in L` runs epoch 3
    assert ids_of(L) == ids_of(fresh.iter_epoch(3))


def test_a_loader_closed_with_an_epoch_read_ahead_stops(data):
    L = make(data, True)
    list(L.iter_epoch(0))
    assert wait_for(lambda: L.stats()["lookahead_batches"] >= 1)
    L.close()  # joins the pipeline thread reading epoch 1: no hang
