# SPDX-License-Identifier: Apache-2.0
"""The device path's feeder (issue 28), on the CPU: every part of dlfeed.Loader's
device= path but the CUDA calls, which host_stream.HostStream stands in for (real copies
into new tensors, made in order on a copy thread of its own, optionally slowed down
like a slow link). Files are written by h5py; every batch that comes out is checked
byte for byte against what h5py wrote, so a host buffer returned to the pool before
its copy has read it (and reused for a later batch) shows as wrong bytes."""
import gc
import threading
import time

import h5py
import numpy as np
import pytest

import dlfeed
from dlfeed._loader import EpochIterator

torch = pytest.importorskip("torch")

from dlfeed.torch import _device  # noqa: E402 (after the torch check)
from host_stream import HostStream  # noqa: E402

SHAPE = (64, 64, 64)  # 256 KiB uint8 samples; a batch of 4 is 1 MiB
BATCH_BYTES = 4 * int(np.prod(SHAPE)) + 4 * 8
KW = dict(fields=["image", "label"], batch_size=4, strategy="global_shuffle", seed=5, resident="off")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("feed")
    rng = np.random.default_rng(29)
    xs, ys = [], []
    for k in range(3):
        x = rng.integers(0, 255, (12,) + SHAPE, dtype=np.uint8)
        y = rng.integers(0, 1000, 12, dtype=np.int64)
        with h5py.File(root / f"part_{k}.h5", "w") as h:
            h.create_dataset("image", data=x)
            h.create_dataset("label", data=y)
        xs.append(x)
        ys.append(y)
    return str(root), np.concatenate(xs), np.concatenate(ys)


def host_loader(root, delay_s=0.0, budget=_device.DEFAULT_H2D_BUDGET, time_every=2, **kw):
    """A CPU loader whose device path copies through HostStream."""
    loader = dlfeed.Loader(root, **{**KW, **kw})
    core = loader._core
    loader._copier = _device.DeviceCopier(HostStream(delay_s), budget, core.record_h2d, core.counters_now,
                                          time_every=time_every)
    return loader


def device_epoch(loader, epoch):
    loader._core.start_epoch(epoch)
    return loader._device_epoch(EpochIterator(loader, epoch))


def check(d, xs, ys):
    assert isinstance(d, _device.DeviceBatch)
    ids = d.sample_ids.astype(np.int64)
    np.testing.assert_array_equal(d["image"].cpu().numpy(), xs[ids])
    np.testing.assert_array_equal(d["label"].cpu().numpy(), ys[ids])


def feeders(name="dlfeed-h2d-feeder"):
    return [t for t in threading.enumerate() if t.name == name]


def cpu_order(root, epochs):
    loader = dlfeed.Loader(root, **KW)
    out = [[b.sample_ids.tolist() for b in loader.iter_epoch(e)] for e in range(epochs)]
    loader.close()
    return out


def test_every_batch_arrives_in_order_byte_for_byte(images):
    root, xs, ys = images
    loader = host_loader(root, delay_s=0.002)
    got = []
    for e in range(2):
        ids = []
        for d in device_epoch(loader, e):
            check(d, xs, ys)
            assert d.epoch == e and len(d) == 4
            ids.append(d.sample_ids.tolist())
        got.append(ids)
    assert got == cpu_order(root, 2)  # the device path changes no order
    h2d = loader.h2d_stats()
    assert h2d["copies"] == 18 and h2d["bytes"] == 18 * BATCH_BYTES
    assert h2d["timed_copies"] == 9  # one in time_every=2
    c = loader.counters()
    assert c["h2d"]["copies"] == 9 and c["h2d"]["bytes"] == 9 * BATCH_BYTES
    assert loader.stats()["held_batches"] == 0  # every host batch went back once its copy was done
    assert len(feeders()) == 1  # one feeder thread for the loader, across epochs
    loader.close()
    assert feeders() == []


def test_the_copies_are_issued_on_the_feeder_thread(images):
    """What the consumer's next() no longer does: convert the host batch and issue its copies."""
    root, _, _ = images
    loader = host_loader(root)
    feed = device_epoch(loader, 0)
    where = []
    convert = feed._job.convert
    feed._job.convert = lambda b: (where.append(threading.get_ident()), convert(b))[1]
    n = sum(1 for _ in feed)
    assert n == 9 and len(where) == 9
    assert threading.get_ident() not in where
    assert set(where) == {feed.feeder.ident}
    loader.close()


def test_host_buffers_go_back_only_after_their_copy_with_a_slow_link(images):
    # A small memory budget makes the pool reuse its buffers at once; each copy reads its
    # host buffer 20 ms after it was issued. Released early, a buffer would hold a later
    # batch's bytes by the time its copy reads it.
    root, xs, ys = images
    loader = host_loader(root, delay_s=0.02, memory_budget=8 * BATCH_BYTES)
    held = []
    for d in device_epoch(loader, 0):
        check(d, xs, ys)
        copier = loader._copier
        with copier.lock:
            not_done = sum(1 for c in copier.pending if not copier.ops.finished(c.done))
        held.append((loader.stats()["held_batches"], not_done))
    assert all(h >= n for h, n in held), held  # every copy not done still holds its host batch
    assert max(n for _, n in held) >= 1  # and copies were in flight while the consumer got batches
    assert loader.stats()["held_batches"] == 0
    loader.close()


def test_the_h2d_budget_bounds_the_bytes_in_flight(images):
    root, xs, ys = images
    loader = host_loader(root, delay_s=0.01, budget=2 * BATCH_BYTES)
    n = 0
    for d in device_epoch(loader, 0):
        check(d, xs, ys)
        n += 1
    h2d = loader.h2d_stats()
    assert n == 9
    assert 0 < h2d["max_in_flight_bytes"] <= 2 * BATCH_BYTES
    assert h2d["waited_for_budget_ns"] > 0  # the feeder waited for copies to finish
    loader.close()


def test_leaving_an_epoch_early_finishes_the_copies_and_closing_the_loader_stops_the_feeder(images):
    root, xs, ys = images
    loader = host_loader(root, delay_s=0.01)
    for d in device_epoch(loader, 0):
        check(d, xs, ys)
        assert len(feeders()) == 1
        break
    del d
    # The for loop dropped the feed: its host batches not issued are dropped, its copies
    # finished and recorded; the loader's feeder thread waits for the next epoch.
    assert loader.h2d_stats()["in_flight_bytes"] == 0
    assert loader.stats()["held_batches"] == 0
    assert len(feeders()) == 1
    # close() on a feed, and a feed inside a generator (dlfeed.torch.Dataset's) closed early.
    feed = device_epoch(loader, 1)
    next(feed)
    feed.close()
    assert loader.stats()["held_batches"] == 0
    with pytest.raises(StopIteration):
        next(feed)

    def wrapped():
        for d in device_epoch(loader, 2):
            yield d["image"]

    g = wrapped()
    next(g)
    g.close()
    assert loader.stats()["held_batches"] == 0 and len(feeders()) == 1
    # The next epoch after all this is whole and right.
    assert sum(1 for d in device_epoch(loader, 3) if check(d, xs, ys) is None) == 9
    thread = feeders()[0]
    loader.close()
    assert feeders() == [] and not thread.is_alive()
    assert feeders("dlfeed-host-stream") == []  # the stand-in's copy thread ends with the loader too


def test_a_loader_dropped_without_close_stops_its_feeder(images):
    root, xs, ys = images
    loader = host_loader(root)
    for d in device_epoch(loader, 0):
        break
    del d
    thread = feeders()[0]
    copier = feeders("dlfeed-host-stream")[-1]
    del loader
    gc.collect()
    thread.join(timeout=10)
    copier.join(timeout=10)
    assert not thread.is_alive() and feeders() == []
    assert not copier.is_alive()


def test_closing_the_loader_stops_an_open_feed(images):
    root, _, _ = images
    loader = host_loader(root, delay_s=0.01)
    feed = device_epoch(loader, 0)
    next(feed)
    loader.close()
    assert feeders() == [] and not feed.feeder.is_alive()
    assert loader.h2d_stats()["in_flight_bytes"] == 0
    with pytest.raises(StopIteration):
        next(feed)


def test_a_new_epoch_closes_the_feed_still_open(images):
    root, xs, ys = images
    loader = host_loader(root)
    old = device_epoch(loader, 0)
    next(old)
    new = device_epoch(loader, 1)
    with pytest.raises(StopIteration):
        next(old)
    assert sum(1 for d in new if check(d, xs, ys) is None) == 9
    assert loader.stats()["held_batches"] == 0
    loader.close()


def test_an_error_on_the_feeder_thread_surfaces_in_next_as_raised(images):
    root, xs, ys = images
    loader = host_loader(root)
    feed = device_epoch(loader, 0)
    convert = feed._job.convert
    seen = []

    def failing(b):
        seen.append(b.index)
        if b.index == 3:
            raise ValueError(f"cannot convert batch {b.index}: field 'image' has no dtype")
        return convert(b)

    feed._job.convert = failing
    got = []
    with pytest.raises(ValueError, match="cannot convert batch 3: field 'image' has no dtype") as e:
        for d in feed:
            check(d, xs, ys)
            got.append(d.index)
    assert got == [0, 1, 2]  # the batches before it arrive first
    assert any("failing" in str(f.name) for f in e.traceback)  # the feeder's own traceback
    del e  # its traceback holds the feeder's frames, and so the batch it failed on
    assert loader.stats()["held_batches"] == 0
    # The feeder thread goes on: the next epoch is whole and right.
    assert sum(1 for d in device_epoch(loader, 1) if check(d, xs, ys) is None) == 9
    loader.close()
    assert feeders() == []


def test_an_error_of_the_host_batches_comes_after_the_batches_before_it(images):
    root, xs, ys = images
    loader = host_loader(root)
    loader._core.start_epoch(0)

    def host():
        it = EpochIterator(loader, 0)
        for _ in range(5):
            yield next(it)
        raise dlfeed.DataError("part_1.h5: offset 4096: expected a chunk of 262144 bytes")

    got = []
    with pytest.raises(dlfeed.DataError, match="part_1.h5: offset 4096"):
        for d in loader._device_epoch(host()):
            check(d, xs, ys)
            got.append(d.index)
    assert got == [0, 1, 2, 3, 4]
    assert loader.stats()["held_batches"] == 0
    loader.close()
    assert feeders() == []


def test_iter_epochs_through_the_feed(images):
    root, xs, ys = images
    loader = host_loader(root)
    epochs = []
    for d in loader._device_epoch(loader.iter_epochs(0, 3)):
        check(d, xs, ys)
        epochs.append(d.epoch)
    assert epochs == [0] * 9 + [1] * 9 + [2] * 9
    loader.close()
    assert feeders() == []


def test_the_consumers_wait_for_the_feeder_is_stall(images):
    # A feeder slower than the consumer (50 ms of its own work per batch): next() waits for
    # batches whose copies are not issued yet; the loader's counters show that as stall
    # ("waited for data"), as a wait in the host next() is.
    root, xs, ys = images
    loader = host_loader(root)
    feed = device_epoch(loader, 0)
    convert = feed._job.convert

    def slow(b):
        time.sleep(0.05)
        return convert(b)

    feed._job.convert = slow
    for d in feed:
        check(d, xs, ys)
    h2d = loader.h2d_stats()
    assert h2d["consumer_waits"] >= 1 and h2d["consumer_waited_ns"] > 100_000_000  # most of 9 x 50 ms
    stall = loader.counters()["counters"]["stall_ns"]
    assert stall["value"] >= h2d["consumer_waited_ns"]
    loader.close()


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run on a GPU machine)")


@needs_cuda
def test_on_cuda_the_feed_delivers_device_batches_and_stops_cleanly(images):  # pragma: no cover - GPU machines
    root, xs, ys = images
    loader = dlfeed.Loader(root, device="cuda", **KW)
    assert loader.pinned
    ids = []
    for e in range(2):
        for d in loader.iter_epoch(e):
            assert d["image"].is_cuda and d["label"].is_cuda
            check(d, xs, ys)
            ids.append(d.sample_ids.tolist())
    assert ids == sum(cpu_order(root, 2), [])
    for d in loader.iter_epoch(2):
        break
    del d
    torch.cuda.synchronize()
    h2d = loader.h2d_stats()
    assert h2d["in_flight_bytes"] == 0 and h2d["copies"] >= 18 and h2d["gb_s"] > 0
    assert loader.counters()["h2d"]["copies"] == h2d["timed_copies"]
    assert loader.stats()["held_batches"] == 0
    # The consumer on a stream of its own: its stream waits for the copies.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for d in loader.iter_epoch(3):
            check(d, xs, ys)
    loader.close()
    assert feeders() == []
    import dlfeed.torch

    ds = dlfeed.torch.Dataset(root, device="cuda", **KW)
    n = 0
    for x, y in ds:
        assert x.is_cuda and y.is_cuda and x.shape == (4,) + SHAPE
        n += 1
    assert n == 9
    ds.loader.close()
    assert feeders() == []
