# SPDX-License-Identifier: Apache-2.0
"""A dataset reads the same whatever the spelling of its path (relative, ".",
a link to it, a bind mount of it): the DLIO layout is decided from the folder
the path resolves to and from the files themselves. Links inside a dataset
folder that lead back up, or reach a file twice, add nothing, and a link that
is not followed is named. Fixtures are written by numpy and h5py, and by
`dlfeed generate --layout dlio` (DLIO's names and folders)."""
import json
import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

import dlfeed as dl  # the module; `dlfeed` is the fixture running the command line
from py_datasets import write_with_hidden


def dlio_npz(dlfeed_cli, root):
    """4 DLIO npz files of 8 samples of 16x16 (x is (16, 16, 8)) in root/train."""
    dlfeed_cli.run("generate", "--format", "npz", "--layout", "dlio", "--dir", root, "--files", 4,
                   "--samples-per-file", 8, "--shape", "16,16")
    return root / "train"


def test_the_dlio_layout_is_the_same_for_every_spelling_of_the_folder(dlfeed, tmp_path, monkeypatch):
    train = dlio_npz(dlfeed, tmp_path / "d")
    (tmp_path / "link").symlink_to(train, target_is_directory=True)
    expected = dlfeed.inspect(train)
    assert expected["num_samples"] == 32
    spellings = {"path": train, "link": tmp_path / "link", "relative": os.path.relpath(train)}
    for name, path in spellings.items():
        got = dlfeed.inspect(path)
        assert got["num_samples"] == 32 and got["samples"][0]["shape"] == [16, 16], name
    monkeypatch.chdir(train)
    got = dlfeed.inspect(".")
    assert got["num_samples"] == 32 and got["samples"][0]["shape"] == [16, 16]
    loader = dl.Loader(".", fields=["x"], batch_size=8)
    assert loader.num_samples == 32 and np.array(next(iter(loader))[0]).shape == (8, 16, 16)


def test_a_dlio_npy_folder_from_inside_it_and_through_a_link(dlfeed, tmp_path, monkeypatch):
    # NPY has no labels to tell its layout by: the folder the path resolves to does.
    dlfeed.run("generate", "--format", "npy", "--layout", "dlio", "--dir", tmp_path / "d", "--files", 2,
               "--samples-per-file", 6, "--shape", "8,8")
    train = tmp_path / "d" / "train"
    (tmp_path / "elsewhere").symlink_to(train, target_is_directory=True)
    assert dlfeed.inspect(tmp_path / "elsewhere")["num_samples"] == 12
    monkeypatch.chdir(train)
    assert dlfeed.inspect(".")["num_samples"] == 12
    monkeypatch.chdir(train.parent)
    assert dlfeed.inspect("train")["num_samples"] == 12


def test_a_dlio_npz_told_by_its_content_under_any_folder_name(tmp_path):
    # np.savez(x=records, y=labels) as DLIO's generator writes it, in a folder
    # not named train: one label per sample of x's last axis says the layout.
    folder = tmp_path / "my_copy"
    folder.mkdir()
    for i in range(2):
        np.savez(folder / f"img_{i}_of_2.npz", x=np.full((5, 4, 3), i, np.uint8), y=np.zeros(3, np.int64))
    loader = dl.Loader(folder, fields=["x"], batch_size=6)
    assert loader.num_samples == 6
    assert np.array(next(iter(loader))[0]).shape == (6, 5, 4)
    # The same names holding a user's own arrays (no y of x's last length) keep the first axis.
    own = tmp_path / "own"
    own.mkdir()
    for i in range(2):
        np.savez(own / f"img_{i}_of_2.npz", x=np.zeros((5, 4, 3), np.uint8), y=np.zeros(5, np.int64))
    assert dl.Loader(own, fields=["x"], batch_size=5).num_samples == 10


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare(1)")
def test_a_bind_mount_of_a_dlio_train_folder_reads_as_the_folder(dlfeed, tmp_path):
    dlfeed.run("generate", "--format", "npy", "--layout", "dlio", "--dir", tmp_path / "d", "--files", 2,
               "--samples-per-file", 6, "--shape", "8,8")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # In a mount namespace of its own: the mount goes when the command ends.
    proc = subprocess.run(["unshare", "-m", "sh", "-c",
                           f"mount --bind '{tmp_path / 'd' / 'train'}' '{mnt}' && '{dlfeed.binary}' inspect --json '{mnt}'"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and any(w in proc.stderr for w in ("mount", "unshare", "not permitted")):
        pytest.skip(f"no bind mount here: {proc.stderr.strip()}")  # a namespace or mount refused, not dlfeed
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_samples"] == 12


def write_h5(path, n, value):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.full((n, 4), value, np.float32))


def test_a_link_back_up_is_not_walked_and_is_named(dlfeed, tmp_path):
    root = tmp_path / "parent"
    data = root / "data"
    other = root / "other"
    data.mkdir(parents=True)
    other.mkdir()
    write_h5(data / "a.h5", 10, 1)
    write_h5(data / "b.h5", 10, 2)
    write_h5(other / "c.h5", 100, 3)  # not part of the dataset
    (data / "up").symlink_to(root, target_is_directory=True)
    (data / "self").symlink_to(data, target_is_directory=True)
    (data / "gone").symlink_to(tmp_path / "nothing_here")
    proc = subprocess.run([dlfeed.binary, "run", "--fields", "x", "--epochs", "1",
                           "--checksum", str(data)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"skipped {data / 'up'}: a link to {root.resolve()}, which holds this dataset folder" in proc.stderr
    assert f"skipped {data / 'gone'}: a broken link" in proc.stderr
    loader = dl.Loader(data, fields=["x"], batch_size=4)
    assert loader.num_samples == 20
    values = sorted(float(v) for b in loader for v in np.array(b[0])[:, 0])
    assert values == [1.0] * 10 + [2.0] * 10


def test_a_file_reached_directly_and_through_a_link_is_read_once(tmp_path):
    data = tmp_path / "data"
    (data / "part").mkdir(parents=True)
    write_h5(data / "part" / "a.h5", 6, 1)
    write_h5(data / "b.h5", 6, 2)
    (data / "again.h5").symlink_to(data / "part" / "a.h5")
    (data / "part_again").symlink_to(data / "part", target_is_directory=True)
    loader = dl.Loader(data, fields=["x"], batch_size=4)
    assert loader.num_samples == 12
    values = sorted(float(v) for b in loader for v in np.array(b[0])[:, 0])
    assert values == [1.0] * 6 + [2.0] * 6
    # A link to a file outside the folder is read (the user put it there).
    outside = tmp_path / "outside.h5"
    write_h5(outside, 3, 7)
    (data / "extra.h5").symlink_to(outside)
    assert dl.Loader(data, fields=["x"], batch_size=4).num_samples == 15


def test_hidden_files_and_folders_are_no_data(tmp_path):
    write_with_hidden(tmp_path)
    loader = dl.Loader(tmp_path, batch_size=5, strategy="sequential")
    rows = np.concatenate([np.array(b[0]) for b in loader])
    assert loader.num_samples == 20 and sorted(set(rows.ravel().tolist())) == [0.0, 1.0]
    # Named directly, a hidden file is read.
    assert dl.Loader(tmp_path / ".x.npy", batch_size=5).num_samples == 10
