# SPDX-License-Identifier: Apache-2.0
"""Scale-out from Python without MPI: an elastic restart (4 loaders checkpointed,
3 loaders resume) reads every sample once; staging keywords give the same batches
and later epochs read the copies."""
import time

import numpy as np
import pytest

import dlfeed


@pytest.fixture(scope="module")
def data(tmp_path_factory, dlfeed):  # (the fixture: the command line, shadowing the module here)
    d = tmp_path_factory.mktemp("scale") / "d"
    dlfeed.run("generate", "--format", "npz", "--layout", "dlio", "--dir", d, "--files", 8,
               "--samples-per-file", 15, "--shape", "8,8")
    return d / "train"


def ids_of(it, batches=None):
    out = []
    for k, b in enumerate(it):
        out.extend(int(i) for i in b.sample_ids)
        if batches is not None and k + 1 == batches:
            break
    return out


def test_elastic_restart_four_to_three_reads_every_sample_once(data):
    kw = dict(fields="x", batch_size=4, strategy="global_feistel", seed=3)
    seen = []
    state = None
    for r in range(4):
        loader = dlfeed.Loader(data, rank=r, world_size=4, **kw)
        seen += ids_of(loader.iter_epoch(1), batches=3)  # 12 each: the job consumed 48 of 120
        state = loader.state()
    s = dlfeed.decode_state(state)
    assert (s["position"], s["world_size"], s["global_start"]) == (12, 4, 0)
    for r in range(3):
        loader = dlfeed.Loader(data, rank=r, world_size=3, **kw)
        loader.restore(state)
        assert loader.epoch == 1
        rest = ids_of(loader)
        assert len(rest) == 24
        seen += rest
        assert dlfeed.decode_state(loader.state())["global_start"] == 48
    assert sorted(seen) == list(range(120))


def test_staging_keywords_same_batches_and_copies_read_later(data, tmp_path):
    kw = dict(fields="x", batch_size=8, strategy="global_shuffle", seed=5)
    plain = dlfeed.Loader(data, **kw)
    staged = dlfeed.Loader(data, stage_dir=tmp_path / "stage", **kw)
    assert staged.options.stage.dir == str(tmp_path / "stage")
    for epoch in range(2):
        a = [np.array(b["x"]) for b in plain.iter_epoch(epoch)]
        b = [np.array(b["x"]) for b in staged.iter_epoch(epoch)]
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
        if epoch == 0:
            deadline = time.time() + 60
            while not staged.stats()["stage"]["done"] and time.time() < deadline:
                time.sleep(0.01)
    st = staged.stats()["stage"]
    assert st["done"] and st["staged"] == st["files"] == 8 and st["files_read_staged"] == 8
    e1 = staged.counters()["epochs"][1]
    assert e1["bytes_read_staged"] == e1["bytes_read"] > 0



def test_a_staging_folder_inside_the_data_folder_is_refused(data):
    """Its copies were read as data by the next loader over that folder: every sample twice, then three
    times, one run after another."""
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(data, fields="x", batch_size=8, stage_dir=data / "stage")
    assert f"stage.dir {data / 'stage'} is inside the data folder {data}" in str(e.value)


def test_a_staged_copy_rewritten_with_its_mtime_set_back_is_an_error_not_its_bytes(tmp_path):
    """A copy being read holds the bytes indexed from its source: a copy rewritten in place with its
    modified time put back (a new change time alone) was indexed again and read on, its new bytes
    delivered; a source may be read so, a copy is refused naming it."""
    import os
    src = tmp_path / "npy"
    src.mkdir()
    for f in range(4):
        np.save(src / f"x_{f}.npy", np.arange(f * 160, (f + 1) * 160, dtype=np.float32).reshape(10, 16))
    kw = dict(batch_size=8, strategy="sequential", resident="off", prefetch="off")
    loader = dlfeed.Loader(src, stage_dir=tmp_path / "stage", **kw)
    list(loader.iter_epoch(0))
    deadline = time.time() + 60
    while not loader.stats()["stage"]["done"] and time.time() < deadline:
        time.sleep(0.01)
    first = [np.array(b[0]) for b in loader.iter_epoch(1)]  # from the copies
    assert loader.stats()["stage"]["files_read_staged"] == 4
    copies = sorted((tmp_path / "stage").iterdir())
    assert len(copies) == 4
    for c in copies:
        st = os.stat(c)
        c.write_bytes(c.read_bytes()[:-64] + bytes(64))  # the last sample's bytes zeroed, same size
        os.utime(c, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(dlfeed.DataError) as e:
        later = [np.array(b[0]) for b in loader.iter_epoch(2)]
        assert all(np.array_equal(x, y) for x, y in zip(first, later)), "the copies' new bytes were delivered"
    assert str(tmp_path / "stage") in str(e.value) and "change time" in str(e.value), e.value
