# SPDX-License-Identifier: Apache-2.0
"""Found by outside testing in the order, resume and framework layers: each a sample
missed, repeated or of another epoch, or a restore that failed where the docs say it works.
Sample i holds the value i, so every check is of which samples arrive."""
import collections
import itertools
import operator
import threading
import time

import numpy as np
import pytest

import dlfeed

N = 55


@pytest.fixture
def data(tmp_path):
    start = 0
    for i, n in enumerate((7, 13, 1, 20, 9, 5)):  # uneven files
        np.save(tmp_path / f"y_{i:03d}.npy", np.arange(start, start + n, dtype=np.int64))
        start += n
    return tmp_path


def ids(batches):
    return [int(v) for b in batches for v in np.asarray(b["data"]).reshape(-1)]


def loader(data, rank=0, world=1, **kw):
    kw.setdefault("strategy", "global_shuffle")
    return dlfeed.Loader(data, batch_size=4, seed=3, rank=rank, world_size=world, **kw)


def test_an_elastic_restore_announces_and_resumes_what_the_old_job_left(data):
    # 5 steps of 4 on 2 ranks consumed 40 samples; rank 0 of 3 reads its share of the other 15:
    # 2 batches, and its length hint says 2 (it said 5, a whole epoch, and dlfeed.tf failed on it).
    olds = [loader(data, r, 2) for r in range(2)]
    seen = []
    for old in olds:
        it = iter(old)
        seen += ids(next(it) for _ in range(5))
    state = olds[0].state()
    rest = []
    for r in range(3):
        new = loader(data, r, 3)
        new.restore(state)
        it = iter(new)
        hint = operator.length_hint(it)
        got = list(it)
        assert hint == len(got) == 2
        rest += ids(got)
    assert sorted(seen + rest) == list(range(N))  # the 15 the old job left, each once


def test_taking_exactly_an_epochs_batches_moves_on_to_the_next_epoch(data):
    # islice(loader, len(loader)) or zip(range(steps), ds) never asks for the end of the epoch: the
    # next `for` ran the same epoch again (the same order every "epoch").
    import dlfeed.torch
    lo = loader(data)
    firsts = []
    for e in range(3):
        batches = list(itertools.islice(lo, len(lo)))
        assert [b.epoch for b in batches] == [e] * len(lo) and sorted(ids(batches)) == list(range(N))
        firsts.append(ids(batches[:1]))
        assert lo.epoch == e + 1
    assert firsts[0] != firsts[1] != firsts[2]
    ds = dlfeed.torch.Dataset(data, batch_size=4, seed=3, strategy="global_shuffle")
    for e in range(3):
        got = [y for _, y in zip(range(len(ds)), ds)]  # one field: a tensor per batch
        assert sorted(int(v) for y in got for v in y) == list(range(N))
        assert ds.epoch == e + 1


def test_a_state_taken_at_an_epochs_end_resumes_with_the_next_epoch_whole(data):
    # A checkpoint after `for b in loader` (or len(loader) steps) restored into a new loader: its first
    # pass was an empty remainder of the spent epoch, so `for epoch in range(start, E): for b in loader`
    # trained one epoch less, each on the previous epoch's order.
    for take in (lambda lo: list(lo), lambda lo: list(itertools.islice(lo, len(lo)))):
        old = loader(data)
        take(old)
        state = old.state()
        new = loader(data)
        new.restore(state)
        assert new.epoch == 0
        assert ids(new) == ids(loader(data).iter_epoch(1)) and new.epoch == 2
        assert ids(new) == ids(loader(data).iter_epoch(2))
        again = loader(data)
        again.restore(state)
        assert [b.epoch for b in again.iter_epochs(count=2)] == [1] * 14 + [2] * 14
    mid = loader(data)
    next(iter(mid))
    state = mid.state()
    mid.close()
    new = loader(data)
    new.restore(state)  # mid-epoch: the rest of epoch 0, as before
    assert ids(new) == ids(loader(data).iter_epoch(0))[4:]
    new.restore(state)
    assert list(new.iter_epoch(0)) != []  # iter_epoch(e) runs the epoch asked for


def test_set_epoch_during_a_direct_iteration_wins_over_the_count(data):
    # set_epoch(4) at a batch before the last was overwritten by the epoch's end (the next
    # iteration ran epoch 1); dlfeed.Loader's `epoch = 4` at the same point wins.
    import dlfeed.torch
    ds = dlfeed.torch.Dataset(data, batch_size=4, seed=3, strategy="global_shuffle")
    for k, _ in enumerate(ds):
        if k == 2:
            ds.set_epoch(4)
    assert ds.epoch == 4
    got = sorted(int(v) for y in ds for v in y)
    assert got == list(range(N)) and ds.epoch == 5
    first = list(itertools.islice(ds, len(ds)))[0]  # the whole epoch: no epoch left running
    assert [int(v) for v in first] == ids(loader(data).iter_epoch(5))[:4]


def test_indices_without_the_explicit_strategy_are_refused(data):
    with pytest.raises(dlfeed.InvalidArgumentError, match="strategy 'sequential' does not read one"):
        loader(data, strategy="sequential", indices=[3, 1, 4])
    assert ids(loader(data, strategy="explicit", indices=[3, 1, 4])) == [3, 1, 4]


def test_local_shuffle_resumes_on_another_world_size_from_a_state_at_an_epochs_end(data):
    old = loader(data, 0, 2, strategy="local_shuffle")
    for _ in old:
        pass
    state = old.state()
    got = []
    for r in range(3):
        new = loader(data, r, 3, strategy="local_shuffle")
        new.restore(state)  # was refused: "cannot start at global position 76"
        epoch1 = ids(new)  # epoch 0 was read whole by the old job: the next pass is epoch 1
        assert epoch1 == ids(loader(data, r, 3, strategy="local_shuffle").iter_epoch(1))  # as a fresh job's
        got += epoch1
    assert set(got) == set(range(N))


def test_local_shuffle_mid_epoch_on_another_world_size_is_refused_late_in_the_epoch_too(data):
    # A rank's part is padded to the largest, so 9 steps of 2 ranks (global position 72 of 55) passed
    # the epoch's size with samples left: the restore took the epoch as spent, and samples 21 and 37
    # were never read. Refused at every step inside the epoch, as at its first steps.
    for steps in (1, 5, 9):
        old = loader(data, 0, 2, strategy="local_shuffle")
        it = iter(old)
        for _ in range(steps):
            next(it)
        new = loader(data, 0, 3, strategy="local_shuffle")
        with pytest.raises(dlfeed.Error, match="partitions samples by rank"):
            new.restore(old.state())
        old.close()


def test_an_iterator_of_an_older_epoch_never_returns_a_batch_of_a_newer_one(data):
    # Thread A iterates epoch 0 while thread B starts epoch 1: between A's check that its epoch is
    # still the running one and its batch, B's start could fall.
    bad = lost = 0
    for _ in range(200):
        lo = dlfeed.Loader(data, batch_size=1, strategy="sequential")
        it_a = lo.iter_epoch(0)
        a, b = [], []
        go = threading.Event()

        def run_a(it_a=it_a, a=a, go=go):
            go.set()
            try:
                a.extend(x.epoch for x in it_a)
            except RuntimeError:
                pass

        def run_b(lo=lo, b=b, go=go):
            go.wait()
            b.extend(x.epoch for x in lo.iter_epoch(1))

        threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad += any(e != 0 for e in a)
        lost += len(b) != N
        lo.close()
    assert bad == 0 and lost == 0


def late_worker(worker_id):
    if worker_id == 2:
        time.sleep(1.5)


def counts(dl):
    c = collections.Counter(int(v) for y in dl for v in y)
    return N - len(c), sum(v - 1 for v in c.values())


def test_persistent_workers_keep_one_epoch_per_iteration_when_one_starts_late(data):
    # An iteration broken off after one batch, its third worker starting late: that worker joined the
    # given-up iteration after the others had gone on, took an epoch of its own, and the next
    # iteration mixed two epochs (11 samples missing, 11 twice).
    torch = pytest.importorskip("torch")
    import dlfeed.torch
    ds = dlfeed.torch.Dataset(data, batch_size=4, seed=5, strategy="global_shuffle")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=3, persistent_workers=True,
                                     worker_init_fn=late_worker)
    it = iter(dl)
    next(it)
    del it
    assert counts(dl) == (0, 0)
    assert counts(dl) == (0, 0)


def test_dataloaders_made_again_with_another_worker_count_each_read_one_epoch(data):
    # The same seeded generator each time: a 3-worker loader's first worker joined the 2-worker
    # generation before it (a full one), the others a new one.
    torch = pytest.importorskip("torch")
    import dlfeed.torch
    ds = dlfeed.torch.Dataset(data, batch_size=4, seed=5, strategy="global_shuffle")
    for e, workers in enumerate((2, 3, 2)):
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                         generator=torch.Generator().manual_seed(0))
        assert counts(dl) == (0, 0)
        assert ds.epoch == e + 1


def test_a_checkpoint_before_the_first_step_after_an_elastic_resume_keeps_the_resume_point(data):
    import dlfeed.torch

    def ds(rank, world):
        return dlfeed.torch.Dataset(data, batch_size=4, seed=5, strategy="global_shuffle", rank=rank,
                                    world_size=world)
    olds = [ds(r, 2) for r in range(2)]
    for old in olds:
        it = iter(old)
        for _ in range(5):
            next(it)
    first = olds[0].state_dict()
    new = ds(0, 3)
    new.load_state_dict(first)
    iter(new)  # the trainer starts the resumed epoch, then checkpoints before its first step
    second = new.state_dict()
    assert second["loader_state"] is not None  # was None: a resume from it read the whole epoch again
    again = ds(0, 3)
    again.load_state_dict(second)
    assert sum(1 for _ in again) == 2


def test_a_persistent_dataloader_made_again_reads_new_epochs(data):
    # The rule for a late worker of a given-up iteration (an iteration number below the running one)
    # also caught a new DataLoader's workers, whose count starts again at 0: they re-read the old
    # loader's last epoch.
    torch = pytest.importorskip("torch")
    import dlfeed.torch
    ds = dlfeed.torch.Dataset(data, batch_size=4, seed=5, strategy="global_shuffle")
    firsts = []
    for _ in range(2):
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                                         generator=torch.Generator().manual_seed(0))
        for _ in range(3):
            batches = list(dl)
            assert counts(batches) == (0, 0)
            firsts.append([int(v) for v in batches[0]])
        del dl
    assert ds.epoch == 6 and len({tuple(f) for f in firsts}) == 6

