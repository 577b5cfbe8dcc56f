# SPDX-License-Identifier: Apache-2.0
"""Large samples at their real size: one-sample HDF5 files written by h5py as
DeepCAM writes them (a 64 MiB float32 `climate/data` and its labels), read
whole with axis="none". Every byte is checked; the structure is asserted
(planned reads and I/O operations per sample, the memory budget chosen and
why, a batch larger than the budget); the speed is bench/large_samples.py's.
"""
import json
import os

import h5py
import numpy as np
import pytest

import dlfeed as dlf

MIB = 1 << 20
H, W, C = 1024, 1024, 16  # 64 MiB of float32


@pytest.fixture(scope="module")
def deepcam_64(tmp_path_factory):
    """3 files of one 64 MiB sample each (+ 4 MiB of labels), contiguous, as h5py writes them."""
    folder = tmp_path_factory.mktemp("large") / "train"
    folder.mkdir()
    arrays = []
    rng = np.random.default_rng(64)
    for k in range(3):
        data = rng.random((H, W, C), dtype=np.float32)
        labels = rng.integers(0, 3, size=(H, W)).astype(np.float32)
        with h5py.File(folder / f"data-{k}.h5", "w") as f:
            f.create_dataset("climate/data", data=data)
            f.create_dataset("climate/labels_0", data=labels)
        arrays.append((data, labels))
    return folder, arrays


def read_all_x(loader):
    return {int(sid): x for batch in loader for sid, x in zip(batch.sample_ids, np.array(batch[0]))}


def read_all(loader, epoch=0):
    out = {}
    for batch in loader.iter_epoch(epoch):
        x, y = np.array(batch[0]), np.array(batch[1])
        for i, sid in enumerate(batch.sample_ids):
            out[int(sid)] = (x[i].copy(), y[i].copy())
    return out


@pytest.mark.parametrize("large_above", [None, 0])  # the large-read route, and without it
def test_64_mib_samples_read_byte_exact_in_few_large_reads(deepcam_64, large_above):
    folder, arrays = deepcam_64
    kw = {} if large_above is None else {"large_above": large_above}
    loader = dlf.Loader(folder, axis="none", fields=["climate/data", "climate/labels_0"], batch_size=2,
                        strategy="global_shuffle", seed=5, resident="off", **kw)
    for epoch in range(2):
        got = read_all(loader, epoch)
        assert sorted(got) == [0, 1, 2]
        for sid, (x, y) in got.items():
            np.testing.assert_array_equal(x, arrays[sid][0])
            np.testing.assert_array_equal(y, arrays[sid][1])
    s = loader.stats()
    assert s.planned_reads == 2 * 3 * 2  # per epoch, per sample: its data and its labels, each one read
    if large_above is None:
        # 64 MiB in 2 MiB pieces and 4 MiB of labels in 2: 34 operations per sample, not the
        # thousand-odd 64 KiB pieces of the small-sample route.
        assert s.io_operations == 2 * 3 * (32 + 2)
    else:
        assert s.io_operations > 2 * 3 * 1000


def test_the_memory_budget_follows_the_machine_unless_given(deepcam_64):
    folder, _ = deepcam_64
    loader = dlf.Loader(folder, axis="none", fields=["climate/data"], batch_size=1)
    s = loader.stats()
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    ranks = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    # A quarter of what the process may use (MemAvailable or less, under a cgroup limit).
    assert 256 * MIB <= s.memory_budget <= max(256 * MIB, avail // 4 // ranks * 11 // 10)
    assert "a quarter of" in s.memory_budget_reason or "256 MiB" in s.memory_budget_reason
    given = dlf.Loader(folder, axis="none", fields=["climate/data"], batch_size=1, memory_budget=300 * MIB)
    assert (given.stats().memory_budget, given.stats().memory_budget_reason) == (300 * MIB, "given (memory_budget)")


def test_a_batch_larger_than_the_budget_is_read_alone_not_refused_nor_hung(deepcam_64):
    """Three 64 MiB samples in one batch with a 64 MiB budget: one batch at a time, every byte."""
    folder, arrays = deepcam_64
    loader = dlf.Loader(folder, axis="none", fields=["climate/data", "climate/labels_0"], batch_size=3,
                        resident="off", memory_budget=64 * MIB)
    got = read_all(loader)
    assert sorted(got) == [0, 1, 2]
    for sid, (x, _) in got.items():
        np.testing.assert_array_equal(x, arrays[sid][0])
    assert loader.stats().peak_in_flight_bytes <= 3 * (64 + 4) * MIB + MIB


@pytest.mark.parametrize("resident", ["off", "on"])
def test_the_first_epochs_batch_buffers_are_made_at_create(deepcam_64, resident):
    """The batch buffers the read-ahead takes are made and touched when the loader is made: the first
    epoch allocates none (they were fresh memory for the kernel to back during its reads), and reads
    every byte into them."""
    folder, arrays = deepcam_64
    loader = dlf.Loader(folder, axis="none", fields=["climate/data", "climate/labels_0"], batch_size=1,
                        strategy="global_shuffle", seed=3, resident=resident, memory_budget=1024 * MIB)
    made = loader.stats().pool_allocations
    assert made >= 2 * 2  # x and labels, for at least the read-ahead's batch and the consumer's
    got = read_all(loader)
    assert sorted(got) == [0, 1, 2]
    for sid, (x, y) in got.items():
        np.testing.assert_array_equal(x, arrays[sid][0])
        np.testing.assert_array_equal(y, arrays[sid][1])
    assert loader.stats().pool_allocations == made
    # More samples a batch than the epoch has: buffers of the epoch's size, which its one batch takes.
    whole = dlf.Loader(folder, axis="none", fields=["climate/data"], batch_size=5, resident="off",
                       memory_budget=1024 * MIB)
    made = whole.stats().pool_allocations
    assert made >= 1 and sorted(read_all_x(whole)) == [0, 1, 2] and whole.stats().pool_allocations == made
    # A batch over the memory budget (192 MiB against 64) is read alone, into a buffer made then.
    alone = dlf.Loader(folder, axis="none", fields=["climate/data"], batch_size=3, resident="off",
                       memory_budget=64 * MIB)
    assert alone.stats().pool_allocations == 0
    assert sorted(read_all_x(alone)) == [0, 1, 2] and alone.stats().pool_allocations == 1


def test_the_cli_names_planned_reads_and_io_operations_apart(dlfeed, deepcam_64, tmp_path):
    folder, _ = deepcam_64
    summary = tmp_path / "s.json"
    out = dlfeed.run("run", "--axis", "none", "--fields", "climate/data", "--batch-size", 3, "--epochs", 1,
                     "--resident", "off", "--summary-json", summary, folder).stdout
    assert "3 planned reads for 3 extents, 96 I/O operations" in out, out
    assert "memory budget " in out
    s = json.loads(summary.read_text())
    e = s["epochs"][0]
    assert (e["planned_reads"], e["extents"], e["coalesced_extents"], e["io_operations"]) == (3, 3, 0, 96)
    assert s["run"]["memory_budget"]["bytes"] >= 256 * MIB and s["run"]["memory_budget"]["why"]


def test_max_read_still_bounds_the_large_pieces(dlfeed, deepcam_64, tmp_path):
    folder, _ = deepcam_64
    summary = tmp_path / "s.json"
    dlfeed.run("run", "--quiet", "--axis", "none", "--fields", "climate/data", "--batch-size", 3, "--epochs", 1,
               "--resident", "off", "--max-read", 1 << 20, "--summary-json", summary, folder)
    e = json.loads(summary.read_text())["epochs"][0]
    assert (e["planned_reads"], e["io_operations"]) == (3, 3 * 64)  # 1 MiB pieces, not 2 MiB


def test_a_python_loop_holding_its_last_batch_takes_no_new_buffer_in_the_first_epoch(tmp_path):
    """`for b in loader` keeps the last batch until the next arrives: with the read-ahead's batches in
    flight, that is one more than it and the batch handed over, and the prefill makes that one too."""
    rng = np.random.default_rng(5)
    samples = [rng.random((1, 256, 256), dtype=np.float32) for _ in range(24)]  # 256 KiB each
    for k, x in enumerate(samples):
        np.save(tmp_path / f"s-{k:02d}.npy", x)
    loader = dlf.Loader(tmp_path, axis="none", batch_size=2, strategy="global_shuffle", seed=1,
                        resident="off", prefetch="depth:2", memory_budget=256 * MIB)
    made = loader.stats().pool_allocations
    held = None
    seen = {}
    for batch in loader:
        for sid, x in zip(batch.sample_ids, np.array(batch[0])):
            seen[int(sid)] = x.copy()
        held = batch  # the loop's own hold, made explicit
    assert held is not None and sorted(seen) == list(range(24))
    for sid, x in seen.items():
        np.testing.assert_array_equal(x, samples[sid])
    assert loader.stats().pool_allocations == made
