# SPDX-License-Identifier: Apache-2.0
"""Files changed under a running dlfeed.Loader (docs/reliability.md): the
batches before the change are what numpy, h5py and TensorFlow wrote, and the
change itself is an error naming the file, never another file's bytes."""
import os

import numpy as np
import pytest

import dlfeed
from py_datasets import loader_kwargs, write_dataset

FORMATS = ["npz", "hdf5", "tfrecord"]


def changed_mid_epoch(tmp_path, fmt, change):
    """Reads a 5-file dataset with one descriptor and no read-ahead, applies
    CHANGE to the last file after two batches; returns (batches before the
    error as (ids, x), the error, the changed path, the samples written).
    The files are read as the epoch goes (resident="off"; held in memory they
    are a snapshot: test_a_file_changed_while_held_in_memory_...)."""
    root, x, _ = write_dataset(fmt, tmp_path / "d", files=5, per_file=8, seed=0)
    other, _, _ = write_dataset(fmt, tmp_path / "other", files=5, per_file=8, seed=1)
    victim = sorted(root.iterdir())[4]
    loader = dlfeed.Loader(root, **loader_kwargs(fmt), batch_size=4, max_open_files=1, prefetch="off",
                           strategy="sequential", resident="off")
    seen = []
    with pytest.raises(dlfeed.Error) as e:
        for k, batch in enumerate(loader):
            seen.append((batch.sample_ids.copy(), np.array(batch[0], copy=True)))
            if k == 1:
                change(victim, sorted(other.iterdir())[4])
    return seen, e.value, victim, x


def replace(victim, other):
    os.replace(other, victim)  # renamed over: a new inode, same name, other bytes


def delete(victim, _):
    os.remove(victim)


def truncate(victim, _):
    os.truncate(victim, 100)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", [replace, delete, truncate], ids=["replace", "delete", "truncate"])
def test_a_file_changed_while_held_in_memory_gives_the_bytes_read_at_create(tmp_path, fmt, change):
    """A small dataset is held in memory (resident="auto"): it was read once at
    create, so a file changed afterwards changes nothing: every sample is the
    one written, never the new file's bytes and never an error."""
    root, x, _ = write_dataset(fmt, tmp_path / "d", files=5, per_file=8, seed=0)
    other, _, _ = write_dataset(fmt, tmp_path / "other", files=5, per_file=8, seed=1)
    victim = sorted(root.iterdir())[4]
    loader = dlfeed.Loader(root, **loader_kwargs(fmt), batch_size=4, strategy="sequential")
    assert loader.stats()["resident_bytes"] > 0, loader.stats()["resident_reason"]
    ids = []
    for k, batch in enumerate(loader):
        ids.extend(batch.sample_ids.tolist())
        for i, xb in zip(batch.sample_ids, batch[0]):
            np.testing.assert_array_equal(xb, x[i])
        if k == 1:
            change(victim, sorted(other.iterdir())[4])
    assert ids == list(range(40))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", [replace, delete, truncate], ids=["replace", "delete", "truncate"])
def test_a_file_changed_mid_epoch_is_an_error_naming_it(tmp_path, fmt, change):
    seen, error, victim, x = changed_mid_epoch(tmp_path, fmt, change)
    assert str(victim) in str(error), str(error)
    assert "offset" in str(error), str(error)  # the offset of the read that found the change
    cause = "open failed: No such file or directory" if change is delete else "replaced or modified while being read"
    assert cause in str(error), str(error)
    # What came before the error is the untouched files' own data, in order:
    # all of files 0-3 (ids 0..31), none of the changed file's (32..39).
    ids = np.concatenate([i for i, _ in seen])
    np.testing.assert_array_equal(ids, np.arange(32))
    for i, xb in seen:
        np.testing.assert_array_equal(xb, x[i])
