# SPDX-License-Identifier: Apache-2.0
"""Held files of raw samples at a fixed stride are batched by the "gather"
route (LoaderStats::route): no per-sample decode, one thread. numpy and h5py
write the files, with uneven sample counts (an empty file, a last file longer
than the others) so that a sample's file is found both ways the planner finds
it; every sample of every field must come out once, byte for byte."""
import h5py
import numpy as np
import pytest

import dlfeed


def epoch(loader, fields):
    """{sample id: tuple of each field's sample} over one epoch."""
    got = {}
    for batch in loader:
        assert batch[0].shape[0] == len(batch.sample_ids)
        for i, sid in enumerate(batch.sample_ids.tolist()):
            assert sid not in got, f"sample {sid} twice"
            got[sid] = tuple(np.array(batch[f][i], copy=True) for f in range(len(fields)))
    return got


def savez_files(root, counts, seed=0):
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    xs, ys, first = [], [], 0
    for f, n in enumerate(counts):
        x = rng.standard_normal((n, 3, 2)).astype(np.float32)
        y = np.arange(first, first + n, dtype=np.int64)  # the global id, as a scalar sample
        np.savez(root / f"part_{f:02d}.npz", x=x, y=y)
        xs.append(x)
        ys.append(y)
        first += n
    return np.concatenate(xs), np.concatenate(ys)


# [6, 0, 11, 1, 6]: uneven (searched); [5, 5, 5, 3]: even but the last (id / 5).
@pytest.mark.parametrize("counts", [[6, 0, 11, 1, 6], [5, 5, 5, 3]])
@pytest.mark.parametrize("strategy", ["sequential", "global_shuffle", "file_shuffle"])
def test_numpy_npz_is_gathered_byte_exact(tmp_path, counts, strategy):
    x, y = savez_files(tmp_path / "d", counts)
    loader = dlfeed.Loader(tmp_path / "d", fields=["x", "y"], batch_size=4, strategy=strategy, seed=7,
                           resident="auto")
    for e in range(3):  # epoch 0 while the files are held, then gathered
        got = epoch(loader, ["x", "y"])
        assert sorted(got) == list(range(len(x)))
        for sid, (xs, ys) in got.items():
            np.testing.assert_array_equal(xs, x[sid])
            assert ys.shape == () and int(ys) == y[sid]
        if e > 0:
            assert loader.stats()["route"] == "gather", loader.stats()
    s = loader.stats()
    assert s["bytes_read"] == s["bytes_delivered"], s  # every byte copied once, nothing around it


def h5_files(root, counts, chunked=()):
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    recs, first = [], 0
    for f, n in enumerate(counts):
        r = rng.integers(0, 1 << 15, size=(n, 2, 2), dtype=np.int16)
        with h5py.File(root / f"f{f}.h5", "w") as h:
            h.create_dataset("records", data=r, chunks=(1, 2, 2) if f in chunked else None)
            h.create_dataset("labels", data=np.arange(first, first + n, dtype=np.int32))
        recs.append(r)
        first += n
    return np.concatenate(recs)


# [5, 5, 8]: every file but the last even, the last longer: searched, not id / 5.
@pytest.mark.parametrize("counts", [[5, 5, 8], [4, 9, 9]])
def test_h5py_contiguous_is_gathered_and_chunked_is_not(tmp_path, counts):
    r = h5_files(tmp_path / "c", counts)
    loader = dlfeed.Loader(tmp_path / "c", fields=["records", "labels"], batch_size=5, strategy="global_shuffle",
                           seed=2, resident="auto")
    for e in range(2):  # epoch 0 while the files are held, then gathered
        got = epoch(loader, ["records", "labels"])
        assert sorted(got) == list(range(len(r)))
        for sid, (rec, lab) in got.items():
            np.testing.assert_array_equal(rec, r[sid])
            assert int(lab) == sid
    assert loader.stats()["route"] == "gather"

    r2 = h5_files(tmp_path / "k", counts, chunked={1})
    mixed = dlfeed.Loader(tmp_path / "k", fields=["records", "labels"], batch_size=5, strategy="global_shuffle",
                          seed=2, resident="auto")
    epoch(mixed, ["records", "labels"])
    got = epoch(mixed, ["records", "labels"])
    assert mixed.stats()["route"] == "pipeline", "a chunked file has no fixed stride"
    for sid, (rec, lab) in got.items():
        np.testing.assert_array_equal(rec, r2[sid])
        assert int(lab) == sid

    # Not held: read and decoded, the same samples.
    read = dlfeed.Loader(tmp_path / "c", fields=["records", "labels"], batch_size=5, strategy="global_shuffle",
                         seed=2, resident="off")
    assert read.stats()["route"] == "pipeline"
    assert {k: v[0].tobytes() for k, v in epoch(read, ["records", "labels"]).items()} == \
        {k: v[0].tobytes() for k, v in got.items()}


# Read, not held: in these orders a sample's neighbour in the file is its
# neighbour in the batch, so each field's run goes straight into the batch
# buffer as one read (Planner::choose_direct); batches of 4 cross files.
@pytest.mark.parametrize("strategy", ["sequential", "file_shuffle"])
def test_in_order_runs_read_into_the_batch_byte_exact(tmp_path, strategy):
    x, y = savez_files(tmp_path / "z", [6, 0, 11, 1, 6])
    r = h5_files(tmp_path / "h", [5, 5, 8])
    for root, fields, want in ((tmp_path / "z", ["x", "y"], (x, y)),
                               (tmp_path / "h", ["records", "labels"], (r, np.arange(len(r))))):
        loader = dlfeed.Loader(root, fields=fields, batch_size=4, strategy=strategy, seed=3, resident="off")
        assert loader.stats()["route"] == "pipeline"
        got = epoch(loader, fields)
        assert sorted(got) == list(range(len(want[0])))
        for sid, (a, b) in got.items():
            np.testing.assert_array_equal(a, want[0][sid])
            assert int(b) == want[1][sid]
        s = loader.stats()
        assert s["bytes_read"] == s["bytes_delivered"], s


def test_a_child_forked_while_the_next_order_is_made_does_not_wait_for_it(tmp_path):
    """Each epoch makes the next one's order on a thread; a child forked just
    after an epoch (a torch worker) has no such thread. The child refuses the
    parent's loader (a clear error), drops it without waiting for that
    thread (no hang), and a loader of its own gives the parent's epoch 1."""
    import gc
    import os
    import signal
    n = 1_000_000
    root = tmp_path / "d"
    root.mkdir()
    np.save(root / "a.npy", np.arange(n, dtype=np.int32))
    loader = dlfeed.Loader(root, batch_size=65536, strategy="global_shuffle", seed=5, resident="auto")
    for _ in loader:  # epoch 0; epoch 1's order is now being made
        pass
    out = tmp_path / "child.npy"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(60)  # a hang fails the test instead of stopping it
            try:
                iter(loader)
                code = 3  # the parent's loader must be refused here
            except ValueError as e:
                assert "before fork()" in str(e), e
                del loader
                gc.collect()
                fresh = dlfeed.Loader(root, batch_size=65536, strategy="global_shuffle", seed=5, resident="auto")
                np.save(out, np.concatenate([b[0] for b in fresh.iter_epoch(1)]))
                code = 0
        except BaseException as e:  # noqa: B036 - reported through the exit code
            import sys
            print("child:", repr(e), file=sys.stderr)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    got = np.concatenate([b[0] for b in loader])  # the parent's epoch 1: the order made ahead
    assert len(np.unique(got)) == n
    np.testing.assert_array_equal(got, np.load(out))
