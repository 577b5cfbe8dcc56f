# SPDX-License-Identifier: Apache-2.0
"""dlfeed.Loader: options, exactly-once delivery, resume, zero copy, buffer
lifetime, GIL release, errors with file and offset, and memory over epochs."""
import gc
import os
import sys
import threading
import time

import numpy as np
import pytest

import dlfeed
from py_datasets import loader_kwargs, rss_growth, write_dataset


@pytest.fixture(scope="module")
def generated(dlfeed, tmp_path_factory):
    """Datasets written by `dlfeed generate` (labels = global id % 10)."""
    base = tmp_path_factory.mktemp("generated")
    out = {}
    for fmt in ("hdf5", "npz", "tfrecord"):
        d = base / fmt
        dlfeed.run("generate", "--format", fmt, "--dir", d, "--files", 3, "--samples-per-file", 20,
                   "--shape", "8,8", "--dtype", "float32")
        out[fmt] = d
    return out


GEN_FIELDS = {"hdf5": dict(fields=["records", "labels"]), "npz": dict(fields=["x", "y"]),
              "tfrecord": dict(fields=["image", "label"], feature_dtype="float32", feature_shape=None,
                               shapes={"image": (8, 8), "label": ()})}
GEN_SAMPLE_FLAGS = {"hdf5": ["--name", "records"], "npz": ["--name", "x"],
                    "tfrecord": ["--feature", "image", "--feature_dtype", "float32"]}


@pytest.mark.parametrize("fmt", ["hdf5", "npz", "tfrecord"])
@pytest.mark.parametrize("strategy", ["sequential", "global_shuffle", "block_shuffle"])
def test_exactly_once_and_bytes_match_cli(dlfeed, generated, tmp_path, fmt, strategy):
    loader = dlfeed_loader(generated[fmt], batch_size=7, strategy=strategy, seed=5, **GEN_FIELDS[fmt])
    assert loader.num_samples == 60 and len(loader) == 9
    ids, xs = [], {}
    for batch in loader:
        assert batch.epoch == 0
        x, y = batch[0], batch[1]
        assert x.shape == (len(batch), 8, 8) and x.dtype == np.float32
        np.testing.assert_array_equal(y, batch.sample_ids % 10)
        for i, sid in enumerate(batch.sample_ids.tolist()):
            xs[sid] = x[i].copy()
        ids.extend(batch.sample_ids.tolist())
    assert sorted(ids) == list(range(60))
    for k in (0, 23, 59):  # the bytes `dlfeed inspect --dump-sample` decodes
        assert dlfeed.dump_sample(generated[fmt], k, tmp_path, *GEN_SAMPLE_FLAGS[fmt]) == xs[k].tobytes()
    assert loader.epoch == 1


def dlfeed_loader(path, **kw):
    return dlfeed.Loader(path, **kw)


def test_epochs_iterate_in_turn_and_shuffle_differently(learnable):
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields="x", batch_size=32, strategy="global_shuffle", seed=1)
    orders = []
    for e in range(3):
        assert loader.epoch == e
        orders.append(np.concatenate([b.sample_ids for b in loader]))
    assert all(sorted(o.tolist()) == list(range(256)) for o in orders)
    assert not np.array_equal(orders[0], orders[1])
    again = np.concatenate([b.sample_ids for b in loader.iter_epoch(1)])
    np.testing.assert_array_equal(again, orders[1])  # an epoch is a pure function of its number


def test_options_reach_the_cpp_loader(learnable):
    root, _, _ = learnable["hdf5"]
    loader = dlfeed.Loader([root], fields=["records", "labels"], batch_size=10, drop_last_batch=True,
                           strategy="block_shuffle", seed=9, rank=1, world_size=2, block_size=8, window=4,
                           io="sync", prefetch="depth:3", memory_budget=1 << 20, threads=2, max_gap=0,
                           coalesce=False, max_open_files=2)
    o = loader.options
    assert (o.batch_size, o.drop_last_batch, o.advanced.prefetch, o.memory_budget, o.threads) == (10, True, "depth:3", 1 << 20, 2)
    assert (o.order.strategy, o.order.seed, o.order.rank, o.order.world_size) == ("block_shuffle", 9, 1, 2)
    assert (o.order.params.block_size, o.order.params.window, o.io.kind, o.advanced.coalesce.enabled) == (8, 4, "sync", False)
    assert loader.samples_per_epoch == 128 and len(loader) == 12  # 128 // 10, last dropped
    sizes = [len(b) for b in loader]
    assert sizes == [10] * 12
    assert loader.stats()["io_backend"] == "sync"


@pytest.mark.parametrize("fmt", ["hdf5", "tfrecord"])
def test_batches_spread_over_io_engines_match_what_the_writer_wrote(learnable, fmt):
    root, x, y = learnable[fmt]
    # resident="off": held files are copied by the look-ahead, not read by the engines.
    loader = dlfeed.Loader(root, batch_size=8, strategy="global_shuffle", seed=4, io_engines=3,
                           io_spread_always=True, resident="off", **loader_kwargs(fmt))
    assert (loader.options.advanced.io_engines, loader.options.advanced.tuning.io_spread_always) == (3, True)
    for _ in range(2):
        seen = []
        for batch in loader:
            np.testing.assert_array_equal(batch[0], x[batch.sample_ids])
            np.testing.assert_array_equal(batch[1], y[batch.sample_ids])
            seen.extend(batch.sample_ids.tolist())
        assert sorted(seen) == list(range(len(x)))
    st = loader.stats()
    assert st["io_engines"] == 3
    assert st["batches_spread"] == 2 * (32 - 11)  # 32 batches an epoch; numbers 0 mod 3 stay on the first


def test_autotune_keyword_on_off_and_auto(learnable):
    root, x, y = learnable["hdf5"]
    kw = dict(fields=["records", "labels"], batch_size=8, strategy="global_shuffle", seed=4, resident="off")
    on = dlfeed.Loader(root, autotune=True, **kw)
    off = dlfeed.Loader(root, autotune=False, **kw)
    assert (on.options.autotune, off.options.autotune) == ("on", "off")
    assert dlfeed.Loader(root, **kw).options.autotune == "auto"
    for a, b in zip(on, off):  # the same batches whatever it tunes
        np.testing.assert_array_equal(a.sample_ids, b.sample_ids)
        np.testing.assert_array_equal(a[0], x[a.sample_ids])
        np.testing.assert_array_equal(b[1], y[b.sample_ids])
    st_on, st_off = on.stats(), off.stats()
    assert st_on["autotune"] and not st_off["autotune"]
    assert st_off["autotune_changes"] == 0
    assert 1 <= st_on["io_engines"] <= st_on["io_engines_made"]
    # An explicit value is never moved: nothing left to tune.
    fixed = dlfeed.Loader(root, autotune=True, io_engines=2, prefetch="depth:4", threads=3, **kw)
    assert not fixed.stats()["autotune"]
    assert fixed.stats()["threads"] == 3
    # Nor are the decode threads where only 2 were made (the floor): on 2 cores, as CI's.
    two = dlfeed.Loader(root, autotune=True, io_engines=2, prefetch="depth:4", **kw)
    if two.stats()["threads"] == 2:
        assert not two.stats()["autotune"]
    with pytest.raises(Exception, match="autotune is auto, on or off, not 'sometimes'"):
        dlfeed.Loader(root, autotune="sometimes", **kw)


def test_resume_mid_epoch_yields_exactly_the_rest(learnable):
    root, _, _ = learnable["hdf5"]
    kw = dict(fields=["records", "labels"], batch_size=16, strategy="global_shuffle", seed=4)
    full = dlfeed.Loader(root, **kw)
    full.epoch = 1
    all_ids = np.concatenate([b.sample_ids for b in full])  # epoch 1
    first = dlfeed.Loader(root, **kw)
    first.epoch = 1
    it = iter(first)
    head = [next(it).sample_ids for _ in range(5)]
    state = first.state()
    assert isinstance(state, bytes) and len(state) < 100
    assert dlfeed.decode_state(state)["epoch"] == 1 and dlfeed.decode_state(state)["position"] == 80
    first.close()

    resumed = dlfeed.Loader(root, **kw)
    resumed.restore(state)
    assert resumed.epoch == 1
    tail = np.concatenate([b.sample_ids for b in resumed])
    np.testing.assert_array_equal(np.concatenate(head + [tail]), all_ids)
    assert resumed.epoch == 2
    with pytest.raises(ValueError, match="seed"):
        dlfeed.Loader(root, **dict(kw, seed=5)).restore(state)


def test_epoch_iterator_length_hint_counts_the_batches_left(learnable):
    import operator

    root, _, _ = learnable["hdf5"]
    kw = dict(fields=["records", "labels"], batch_size=24, strategy="global_shuffle", seed=4)
    loader = dlfeed.Loader(root, **kw)
    assert len(loader) == 11  # 256 samples: 10 of 24, then 16
    it = iter(loader)
    assert operator.length_hint(it) == 11
    for left in range(10, 6, -1):
        next(it)
        assert operator.length_hint(it) == left
    state = loader.state()
    resumed = dlfeed.Loader(root, **kw)
    resumed.restore(state)
    rest = iter(resumed)
    assert operator.length_hint(rest) == 7
    assert len(list(rest)) == 7 and operator.length_hint(rest) == 0
    assert operator.length_hint(iter(resumed)) == 11  # the next epoch, whole


def test_numpy_arrays_share_the_batch_buffer(learnable):
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=32)
    batch = next(iter(loader))
    x1, x2, t = batch["x"], batch["x"], batch.tensor("x")
    assert x1.ctypes.data == x2.ctypes.data == t.data_ptr
    assert not x1.flags.owndata and x1.base is not None
    assert np.shares_memory(x1, t.numpy())
    assert t.shape == (32, 8, 8) and t.dtype == np.float32 and t.nbytes == 32 * 64 * 4
    assert set(batch.arrays()) == {"x", "y"} and "x" in batch and batch.keys() == ["x", "y"]
    assert np.asarray(t).ctypes.data == t.data_ptr
    assert t.__dlpack_device__() == (1, 0)


def test_buffer_is_recycled_only_when_python_lets_go(learnable):
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x"], batch_size=32, prefetch="depth:2", memory_budget=64 << 10)
    it = iter(loader)
    kept = next(it)["x"]  # only the array survives: it keeps the batch alive
    snapshot = kept.copy()
    ptr = kept.ctypes.data
    for _ in range(3):
        for b in loader:
            assert b["x"].ctypes.data != ptr  # never handed out again while `kept` lives
            del b
    np.testing.assert_array_equal(kept, snapshot)
    assert loader.stats()["pool_reuses"] > 0  # the other buffers were recycled
    capsule = loader.iter_epoch(0).next().tensor("x").__dlpack__()  # an unconsumed capsule frees too
    del capsule, kept
    gc.collect()


@pytest.mark.parametrize("prefetch", ["off", "depth:1", "depth:2", "budget:1K"])
def test_keeping_every_batch_never_hangs(learnable, prefetch):
    # list(loader): kept batches count against the memory budget, not the
    # look-ahead, and a waiting consumer always gets its next batch.
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x"], batch_size=8, prefetch=prefetch, memory_budget=4096)
    kept = list(loader)
    assert sum(len(b.sample_ids) for b in kept) == loader.samples_per_epoch


def test_gil_is_released_while_cpp_works(tmp_path):
    rng = np.random.default_rng(0)
    for f in range(2):  # compressed: each batch is real inflate work in next()
        np.savez_compressed(tmp_path / f"p{f}.npz", x=rng.standard_normal((48, 128, 128)).astype(np.float32))
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    t = threading.Thread(target=spin)
    t.start()
    try:
        c0 = count[0]
        time.sleep(0.2)  # sleep releases the GIL: the spinner's rate alone
        rate = (count[0] - c0) / 0.2
        loader = dlfeed.Loader(tmp_path, fields="x", batch_size=16, prefetch="off", threads=1, io="sync")
        it = iter(loader)
        inside, spent = 0, 0.0
        while True:
            c0, t0 = count[0], time.perf_counter()
            b = it.next()
            spent += time.perf_counter() - t0
            inside += count[0] - c0
            if b is None:
                break
            del b  # prefetch="off": the next batch is read only after this one is dropped
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert spent > 0.02, spent
    # Holding the GIL, next() would leave the spinner ~0.5 ms per call at most.
    assert inside > 0.2 * rate * spent, (inside, rate, spent)


def test_missing_path_is_file_not_found(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError) as e:
        dlfeed.Loader(missing)
    assert isinstance(e.value, dlfeed.NotFoundError) and isinstance(e.value, dlfeed.Error)
    assert str(missing) in str(e.value) and e.value.code == "NOT_FOUND"


def test_bad_options_are_value_errors(learnable):
    root, _, _ = learnable["npz"]
    with pytest.raises(ValueError, match="strategy"):
        dlfeed.Loader(root, strategy="bogus")
    with pytest.raises(ValueError):
        dlfeed.Loader(root, io="carrier_pigeon")
    with pytest.raises(ValueError):
        dlfeed.Loader(root, fields="x", prefetch="sometimes")
    with pytest.raises(TypeError):
        dlfeed.Loader(root, batchsize=3)


def test_corrupt_record_names_file_and_offset(tmp_path):
    root, _, _ = write_dataset("tfrecord", tmp_path / "d", files=1, per_file=8)
    path = next(root.iterdir())
    data = bytearray(path.read_bytes())
    rec = len(data) // 8
    data[3 * rec + 40] ^= 0xFF  # inside record 3's payload: its CRC fails
    path.write_bytes(bytes(data))
    loader = dlfeed.Loader(root, **loader_kwargs("tfrecord"), batch_size=2)
    with pytest.raises(OSError) as e:
        for _ in loader:
            pass
    assert isinstance(e.value, dlfeed.DataError), type(e.value)
    msg = str(e.value)
    assert str(path) in msg and "offset" in msg, msg


def test_truncated_file_names_file_and_offset(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 8), np.float32))
    p = tmp_path / "a.npy"
    p.write_bytes(p.read_bytes()[:40])  # cut inside the header
    with pytest.raises(dlfeed.Error) as e:
        dlfeed.Loader(p)
    assert isinstance(e.value, (ValueError, OSError))
    assert str(p) in str(e.value) and "offset" in str(e.value), str(e.value)


def test_ten_epochs_do_not_grow_rss(tmp_path):
    import torch

    root, _, _ = write_dataset("npz", tmp_path / "d", files=4, per_file=256)
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=32, strategy="global_shuffle")

    def epoch():
        for b in loader:
            x = torch.from_dlpack(b.tensor("x"))
            y = b["y"]
            float(x.sum()), int(y.sum())
            del b, x, y

    grown = rss_growth(epoch, passes=10)  # after 2 warm epochs: pool, allocator, torch
    assert grown < 4 << 20, f"RSS grew {grown / 1e6:.1f} MB over 10 epochs"


def test_counters_compute_regions_and_trace(learnable, tmp_path):
    import json
    import time

    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=8, trace=True)
    n = 0
    for batch in loader:
        with loader.compute():
            time.sleep(0.003)  # a "training step" longer than reading a small batch
        n += len(batch.sample_ids)
    c = loader.counters()
    epoch = c["epochs"][0]
    assert epoch["samples"] == n
    assert epoch["steps"] == len(loader)
    assert epoch["au_percent"] > 50  # compute dominates: the trainer rarely waited
    assert "epoch" in loader.summary()
    loader.write_trace(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("name") == "compute" for e in events)
    loader.write_trace(tmp_path / "t.pfw", format="dftracer")
    lines = [ln for ln in (tmp_path / "t.pfw").read_text().splitlines() if ln.strip() not in ("[", "]", "")]
    phases = [json.loads(ln.rstrip(","))["ph"] for ln in lines]  # one JSON object per line
    assert set(phases) <= {"X", "M"} and phases.count("X") > 0
    with pytest.raises(ValueError):
        loader.write_trace(tmp_path / "x", format="nope")


def test_wrong_types_in_shapes_batch_size_and_batch_keys_are_named(tmp_path):
    """shapes={"x": "32"} was read as the dims 3 and 2, (3.9, 2) as (3, 2), batch_size=True as 1, and
    batch[1.0] raised pybind11's internal cast error: each is a TypeError naming what it expected. An epoch
    past the last one a loader takes is refused, as iter_epoch refuses it."""
    np.save(tmp_path / "x.npy", np.zeros((4, 6), np.float32))
    for kw, want in [({"shapes": {"x": "32"}}, "expected a sequence of ints"),
                     ({"shapes": {"x": (3.9, 2)}}, "expected ints, found 3.9"),
                     ({"shapes": {"x": 6}}, "expected a sequence of ints"),
                     ({"batch_size": True}, "batch_size=True: expected int")]:
        with pytest.raises(TypeError) as e:
            dlfeed.Loader(tmp_path, **{"batch_size": 2, **kw})
        assert want in str(e.value), (kw, e.value)
    loader = dlfeed.Loader(tmp_path, batch_size=2, shapes={"x": (3, 2)})
    b = next(iter(loader))
    assert np.asarray(b[0]).shape == (2, 3, 2)
    for key in (1.0, None):
        with pytest.raises(TypeError, match="a field's name .str. or index .int., not"):
            b[key]
    loader.close()
    loader = dlfeed.Loader(tmp_path, batch_size=2)
    list(loader.iter_epoch(2**64 - 2))
    with pytest.raises(ValueError, match="expected an int from 0 to"):
        iter(loader)
