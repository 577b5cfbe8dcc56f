# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 4 dlfeed run --cache SIZE` (docs/distributed.md, "The job cache"):
the job's memory as one cache of the first epoch's reads. Every test compares the
job checksum (a hash of every byte of every sample, with its id) to the run without
the cache, and the bytes each epoch took from the files, the rank's own part and
other ranks, as the summary JSON counts them. Fixtures are h5py files (images and
labels, as HEP CNN writes them) and numpy .npy files (one sample per file)."""
import json
import re

import numpy as np
import pytest

from test_mpi_cli import NP, checksum, mpi_run, mpirun  # noqa: F401  (mpirun: the fixture)

EPOCHS = 3


@pytest.fixture(scope="module")
def h5_data(tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    d = tmp_path_factory.mktemp("jc_h5")
    rng = np.random.default_rng(7)
    for f in range(4):
        with h5py.File(d / f"part{f}.h5", "w") as h:
            h["x"] = rng.standard_normal((40, 16, 16), dtype=np.float32)
            h["y"] = rng.integers(0, 10, 40, dtype=np.int64)
    return d


@pytest.fixture(scope="module")
def npy_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("jc_npy")
    rng = np.random.default_rng(8)
    for k in range(64):
        np.save(d / f"s{k:03d}.npy", rng.integers(0, 255, (24, 24, 3), dtype=np.uint8))
    return d


@pytest.fixture(scope="module")
def dlio_npz(tmp_path_factory):
    """DLIO's NPZ layout, as its generator writes it with numpy: x (32, 32, 8) with the
    samples on the last axis (each sample's bytes strided over the array), y (8,)."""
    d = tmp_path_factory.mktemp("jc_dlio") / "train"
    d.mkdir()
    rng = np.random.default_rng(9)
    for f in range(8):
        np.savez(d / f"img_{f}_of_8.npz", x=rng.integers(0, 255, (32, 32, 8), dtype=np.uint8),
                 y=np.zeros(8, dtype=np.int64))
    return d


def run(mpirun, dlfeed, tmp_path, data, *args, fields=("--fields", "x,y"), strategy="global_shuffle",  # noqa: F811
        single_copy=False, np=NP):
    s = tmp_path / f"s{len(list(tmp_path.iterdir()))}.json"
    cmd = [*fields, "--strategy", strategy, "--epochs", EPOCHS, "--batch-size", 4, "--checksum", "--summary-json", s,
           *args, data]
    if single_copy:
        out = mpi_run_single_copy(mpirun, dlfeed, *cmd, np=np)
    else:
        out = mpi_run(mpirun, dlfeed, *cmd, np=np)
    return out, json.loads(s.read_text())


def mpi_run_single_copy(mpirun, dlfeed, *args, np=NP):  # noqa: F811
    """mpi_run with Open MPI's single-copy mechanism left as it is (CMA where the kernel allows it)."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_btl_vader_single_copy_mechanism"}
    proc = subprocess.run([*mpirun, "-np", str(np), dlfeed.binary, "run", "--mpi=on", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"mpirun exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def epoch_bytes(e):
    return e["bytes_read_source"] + e["bytes_read_peers"] + e["bytes_read_node"] + e["bytes_read_local"]


@pytest.mark.parametrize("strategy", ["global_shuffle", "local_shuffle", "sequential"])
def test_cache_larger_than_the_dataset_reads_the_files_once(mpirun, dlfeed, h5_data, tmp_path, strategy):  # noqa: F811
    plain, plain_job = run(mpirun, dlfeed, tmp_path, h5_data, strategy=strategy)
    out, job = run(mpirun, dlfeed, tmp_path, h5_data, "--cache", "64M", "--cache-ranks-per-node", 1,
                   "--trace", tmp_path / "t.json", strategy=strategy)
    assert checksum(out) == checksum(plain), "the same bytes as without the cache"
    if strategy == "global_shuffle":
        # The rounds of gets of other ranks' memory are in each rank's trace, with their sizes.
        for r in range(NP):
            events = json.loads((tmp_path / f"t.rank{r}.json").read_text())["traceEvents"]
            gets = [ev for ev in events if ev["name"] == "job_cache_gets"]
            assert gets and all(ev["cat"] == "job_cache" and ev["args"]["size"] > 0 for ev in gets), r
    jc = job["job_cache"]
    assert jc["nodes"] == NP
    assert jc["held_bytes"] == jc["dataset_bytes"] > 160 * 16 * 16 * 4
    e0, *later = jc["epochs"]
    assert e0["bytes_read_source"] == jc["dataset_bytes"], "the first epoch reads every extent once, from the files"
    assert e0["bytes_kept"] == jc["dataset_bytes"]
    for e in later:
        assert e["bytes_read_source"] == 0 and e["bytes_missed"] == 0, e
        assert epoch_bytes(e) == jc["dataset_bytes"]
        if strategy == "global_shuffle":
            # Each rank holds a quarter: about three quarters come from other nodes.
            assert e["bytes_read_peers"] > jc["dataset_bytes"] // 2, e
            assert e["remote_gets"] > 0
        assert sum(r["bytes_read_source"] for r in e["per_rank"]) == 0
    # The loader's own counters agree: every epoch delivered the same bytes.
    assert [x["bytes_delivered"] for x in job["epochs"]] == [x["bytes_delivered"] for x in plain_job["epochs"]]
    assert re.search(r"job cache: epoch 1: 0\.0 MiB from the files", out), out


@pytest.mark.parametrize("strategy", ["global_shuffle", "sequential"])
def test_half_the_dataset_cached_reads_half_from_the_files(mpirun, dlfeed, npy_data, tmp_path, strategy):  # noqa: F811
    plain, _ = run(mpirun, dlfeed, tmp_path, npy_data, fields=(), strategy=strategy)
    dataset = 64 * 24 * 24 * 3  # the .npy payloads: 24 rows of 72 bytes per file
    per_node = (dataset // 2 + 64 * 24 // 2 * 8) // NP  # half the rows, each slot with its 8-byte stamp
    out, job = run(mpirun, dlfeed, tmp_path, npy_data, "--cache", per_node, "--cache-ranks-per-node", 1, fields=(),
                   strategy=strategy)
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    assert jc["dataset_bytes"] == dataset
    assert 0.48 * dataset <= jc["held_bytes"] <= 0.5 * dataset
    for e in jc["epochs"][1:]:
        assert epoch_bytes(e) == dataset
        # Exactly what the job does not hold: a read merging held and unheld rows takes
        # the held ones from the cache and only the others from the files.
        assert e["bytes_missed"] == 0
        assert e["bytes_read_source"] == dataset - jc["held_bytes"]
        assert e["bytes_read_source"] <= 0.55 * dataset


def test_strided_samples_of_one_array_are_held_as_one_run(mpirun, dlfeed, dlio_npz, tmp_path):  # noqa: F811
    # A strided sample's extent spans nearly its whole array, overlapping the
    # others': the array is held as one run, read whole by its holder.
    plain, _ = run(mpirun, dlfeed, tmp_path, dlio_npz, fields=("--fields", "x"))
    out, job = run(mpirun, dlfeed, tmp_path, dlio_npz, "--cache", "16M", "--cache-ranks-per-node", 1,
                   fields=("--fields", "x"))
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    assert jc["held_bytes"] == jc["dataset_bytes"] == 8 * 32 * 32 * 8, "one run per file: its x array"
    for e in jc["epochs"][1:]:
        assert e["bytes_read_source"] == 0 and e["bytes_read_peers"] > 0, e


@pytest.mark.parametrize("engines", [1, 3])
def test_ranks_of_one_node_read_each_others_parts(mpirun, dlfeed, h5_data, tmp_path, engines):  # noqa: F811
    # With 3 I/O engines (spread always), three backends of a rank share its part of the cache.
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data)
    out, job = run(mpirun, dlfeed, tmp_path, h5_data, "--cache", "64M", "--cache-ranks-per-node", 2,
                   "--io-engines", engines, "--io-spread-always")
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    assert jc["nodes"] == 2
    for e in jc["epochs"][1:]:
        assert e["bytes_read_source"] == 0
        assert e["bytes_read_node"] > 0 and e["bytes_read_peers"] > 0 and e["bytes_read_local"] > 0, e
        assert epoch_bytes(e) == jc["dataset_bytes"]


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_ranks_of_one_node_read_each_others_parts_with_plain_loads(mpirun, dlfeed, h5_data, tmp_path,  # noqa: F811
                                                                    where):
    # The ranks MPI finds on one machine are one node: the memory shares are one MPI shared-memory
    # window (the folder's files are mapped by every rank), read with memcpy, no MPI_Get. No window
    # spans nodes, so this needs no single-copy mechanism (the tests turn it off).
    folder = tmp_path / "nvme"
    folder.mkdir()
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data)
    extra = ("--cache-folder", folder) if where == "folder" else ()
    out, job = run(mpirun, dlfeed, tmp_path, h5_data, "--cache", "64M", *extra)
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    assert jc["nodes"] == 1 and jc["node_loads"] is True
    for e in jc["epochs"][1:]:
        assert e["bytes_read_source"] == 0 and e["bytes_read_peers"] == 0 and e["remote_gets"] == 0, e
        # Each rank holds a quarter: about three quarters come from the node's other ranks.
        assert e["bytes_read_node"] > jc["dataset_bytes"] // 2 and e["bytes_read_local"] > 0, e
        assert epoch_bytes(e) == jc["dataset_bytes"]
        for r in e["per_rank"]:
            assert r["node_loads"] is True and r["remote_gets"] == 0, r
    assert list(folder.iterdir()) == [], "nothing left behind"


@pytest.fixture(scope="module")
def single_copy_works(mpirun, dlfeed, h5_data, tmp_path_factory):  # noqa: F811
    """Whether Open MPI's single-copy mechanism (CMA) works here: containers often forbid the
    process_vm_readv it uses, and a job that relies on it then fails."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_btl_vader_single_copy_mechanism"}
    s = tmp_path_factory.mktemp("cma") / "s.json"
    proc = subprocess.run([*mpirun, "-np", str(NP), dlfeed.binary, "run", "--mpi=on", "--fields", "x", "--epochs", "2",
                           "--cache", "64M", "--cache-ranks-per-node", "2", "--summary-json", str(s), str(h5_data)],
                          capture_output=True, text=True, timeout=300, env=env)
    return proc.returncode == 0 and json.loads(s.read_text())["job_cache"]["node_loads"] is True


def test_two_nodes_of_two_ranks_load_within_and_get_between(mpirun, dlfeed, h5_data, tmp_path,  # noqa: F811
                                                           single_copy_works):
    # A window between nodes over the node's shared memory needs Open MPI's single-copy mechanism
    # (CMA): this test leaves it on. Without it the ranks of a node read each other's shares with
    # MPI_Get (test_ranks_of_one_node_read_each_others_parts covers that).
    if not single_copy_works:
        pytest.skip("Open MPI's single-copy mechanism (CMA) does not work here")
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data)
    out, job = run(mpirun, dlfeed, tmp_path, h5_data, "--cache", "64M", "--cache-ranks-per-node", 2,
                   single_copy=True)
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    assert jc["nodes"] == 2 and jc["node_loads"] is True
    for e in jc["epochs"][1:]:
        assert e["bytes_read_source"] == 0, e
        assert e["bytes_read_node"] > 0 and e["bytes_read_peers"] > e["bytes_read_node"], e
        assert e["remote_gets"] > 0 and epoch_bytes(e) == jc["dataset_bytes"]


@pytest.mark.parametrize("single_copy", [False, True])
@pytest.mark.parametrize("np_, k", [(3, 2), (4, 3)])
def test_nodes_of_different_sizes(mpirun, dlfeed, h5_data, tmp_path, np_, k, single_copy,  # noqa: F811
                                  single_copy_works):
    # A node of one rank beside nodes of several: every rank makes the same windows (the collectives
    # are the job's), whether the nodes' ranks read each other's shares with loads (with Open MPI's
    # single-copy mechanism) or with MPI_Get (without it).
    if single_copy and not single_copy_works:
        pytest.skip("Open MPI's single-copy mechanism (CMA) does not work here")
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data, np=np_)
    out, job = run(mpirun, dlfeed, tmp_path, h5_data, "--cache", "64M", "--cache-ranks-per-node", k, np=np_,
                   single_copy=single_copy)
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    assert jc["nodes"] == 2
    assert jc["node_loads"] is single_copy
    for e, delivered in zip(jc["epochs"][1:], job["epochs"][1:]):
        assert e["bytes_read_source"] == 0 and e["bytes_read_node"] > 0 and e["bytes_read_peers"] > 0, e
        # 160 samples on 3 ranks: 2 padded reads, so an epoch is the bytes delivered, not the dataset's.
        assert epoch_bytes(e) == delivered["bytes_delivered"] >= jc["dataset_bytes"]
        assert len({r["node_loads"] for r in e["per_rank"]}) == 1, "the same on every rank"


def test_ranks_of_one_node_may_name_their_own_cache_folders(mpirun, dlfeed, h5_data, tmp_path):  # noqa: F811
    # One disk per rank (or a folder relative to each rank's working directory): the node's ranks
    # map each other's files where each made them.
    import os
    import subprocess
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data)
    for r in range(NP):
        (tmp_path / f"disk{r}").mkdir()
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    script = (f'cd {tmp_path}/disk$OMPI_COMM_WORLD_RANK && exec "$0" run --mpi=on --fields x,y --strategy '
              f'global_shuffle --epochs {EPOCHS} --batch-size 4 --checksum --cache 64M --cache-folder . "$1"')
    proc = subprocess.run([*mpirun, "-np", str(NP), "sh", "-c", script, dlfeed.binary, str(h5_data)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert checksum(proc.stdout) == checksum(plain)
    assert re.search(r"job cache: epoch 1: 0\.0 MiB from the files", proc.stdout), proc.stdout
    assert all(list((tmp_path / f"disk{r}").iterdir()) == [] for r in range(NP)), "nothing left behind"


def test_cache_in_a_node_local_folder(mpirun, dlfeed, h5_data, tmp_path):  # noqa: F811
    # Each rank's share a file in the folder (mapped, removed at once): beyond memory, on a local disk.
    # Open MPI windows over a file's memory need its single-copy mechanism (CMA), which
    # the other tests turn off (containers often forbid it): this test leaves it on.
    folder = tmp_path / "nvme"
    folder.mkdir()
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data)
    probe = mpi_run_error(mpirun, dlfeed, "--fields", "x", "--epochs", 1, "--cache", "64M", "--cache-ranks-per-node", 1,
                          "--cache-folder", folder, h5_data, single_copy=True, check=False)
    if "single-copy mechanism" in probe:
        pytest.skip("Open MPI has no single-copy mechanism here (CMA): windows over a file's memory are refused")
    out, job = run(mpirun, dlfeed, tmp_path, h5_data, "--cache", "64M", "--cache-ranks-per-node", 1,
                   "--cache-folder", folder, single_copy=True)
    assert checksum(out) == checksum(plain)
    jc = job["job_cache"]
    for e in jc["epochs"][1:]:
        assert e["bytes_read_source"] == 0 and e["bytes_read_peers"] > 0, e
    assert list(folder.iterdir()) == [], "nothing left behind"
    err = mpi_run_error(mpirun, dlfeed, "--fields", "x", "--cache", "64M", "--cache-folder", tmp_path / "nowhere",
                        h5_data)
    assert "cannot create" in err and "nowhere" in err


def test_a_cache_folder_without_room_is_an_error_at_create(mpirun, dlfeed, h5_data, tmp_path):  # noqa: F811
    """A share larger than the folder's free space is refused when the cache is made, naming the folder,
    not a rank killed by SIGBUS at the first copy into its sparse file, mid-epoch."""
    import subprocess
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        err = mpi_run_error(mpirun, dlfeed, "--fields", "x", "--epochs", 1, "--cache", "64M",
                            "--cache-ranks-per-node", 1, "--cache-folder", small, h5_data, single_copy=True)
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)
    if "single-copy mechanism" in err:
        pytest.skip("Open MPI has no single-copy mechanism here (CMA): windows over a file's memory are refused")
    assert "cannot reserve" in err and str(small) in err, err[-3000:]
    assert "Bus error" not in err and "signal 7" not in err, err[-3000:]


def mpi_run_error(mpirun, dlfeed, *args, single_copy=False, check=True):  # noqa: F811
    import os
    import subprocess
    env = dict(os.environ)
    if not single_copy:
        env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    proc = subprocess.run([*mpirun, "-np", str(NP), dlfeed.binary, "run", "--mpi=on", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)
    if check:
        assert proc.returncode != 0, proc.stdout
    assert "Sanitizer" not in proc.stderr and "Segmentation" not in proc.stderr, proc.stderr
    return proc.stderr


def test_throttled_source_is_the_same_data(mpirun, dlfeed, h5_data, tmp_path):  # noqa: F811
    plain, _ = run(mpirun, dlfeed, tmp_path, h5_data)
    out, _ = run(mpirun, dlfeed, tmp_path, h5_data, "--source-throttle", "64M:200us", "--cache", "64M")
    assert checksum(out) == checksum(plain)


def test_cache_without_mpi_is_a_clear_error(dlfeed, h5_data):
    err = dlfeed.error("run", "--mpi=off", "--fields", "x", "--cache", "1G", h5_data)
    assert "--cache" in err and "mpirun" in err


@pytest.mark.parametrize("value,says", [
    ("fast", "--source-throttle 'fast': expected BANDWIDTH[:LATENCY]"),
    ("nan", "the bandwidth from 1 B/s to 1 PB/s"),  # was taken, and the run waited forever
    ("NaN:1ms", "the bandwidth from 1 B/s to 1 PB/s"),
    ("1e-300", "the bandwidth from 1 B/s to 1 PB/s"),  # these four overflowed to no throttle at all
    ("1e25", "the bandwidth from 1 B/s to 1 PB/s"),
    ("64M:infs", "is not a latency from 0 to 1 hour"),
    ("64M:1e20s", "is not a latency from 0 to 1 hour"),
])
def test_bad_throttle_is_a_clear_error(dlfeed, h5_data, value, says):
    err = dlfeed.error("run", "--fields", "x", "--source-throttle", value, h5_data)  # (a hang: 300 s, then fails)
    assert says in err, err


# Python under mpirun: dlfeed.Loader(job_cache=...) and dlfeed.torch.Dataset pass it on.
SCRIPT = r'''
import hashlib, json, os, pathlib, sys, time
import dlfeed
out, data, cache, api = sys.argv[1:5]
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])


def barrier(tag):  # the ranks start each epoch together, as a trainer's all-reduce keeps them
    pathlib.Path(f"{out}.{tag}.{rank}").touch()
    while not all(os.path.exists(f"{out}.{tag}.{r}") for r in range(size)):
        time.sleep(0.01)


kw = dict(fields=["x", "y"], strategy="global_shuffle")
if cache != "none":
    kw.update(job_cache=cache, job_cache_ranks_per_node=1)
else:
    kw.update(rank=rank, world_size=size)
epochs = []
if api == "loader":
    loader = dlfeed.Loader(data, batch_size=4, **kw)
    for e in range(3):
        barrier(e)
        seen = []
        for b in loader.iter_epoch(e):
            for i, sid in enumerate(b.sample_ids):
                seen.append((int(sid), hashlib.sha256(b["x"][i].tobytes() + b["y"][i].tobytes()).hexdigest()))
        epochs.append({"samples": sorted(seen), "stats": loader.job_cache_stats()})
else:
    import torch
    ds = dlfeed.torch.Dataset(data, batch_size=4, as_dict=True, **kw)
    for e in range(3):
        barrier(e)
        ds.set_epoch(e)
        seen = []
        for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0):
            for i in range(len(b["x"])):
                seen.append(hashlib.sha256(b["x"][i].numpy().tobytes() + b["y"][i].numpy().tobytes()).hexdigest())
        epochs.append({"samples": sorted(seen)})
with open(f"{out}.{rank}", "w") as f:
    json.dump(epochs, f)
'''


def ranks_run(mpirun, tmp_path, name, script, *args):  # noqa: F811
    """Python `script` (tmp_path/NAME.py) under mpirun -np NP, with the output path, then `args`:
    each rank writes its JSON to OUT.RANK; returns them in rank order."""
    import os
    import subprocess
    import sys
    path = tmp_path / f"{name}.py"
    path.write_text(script)
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([*mpirun, "-np", str(NP), sys.executable, str(path), str(out), *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)
    if "needs dlfeed built with MPI" in proc.stderr:
        pytest.skip("this dlfeed module was built without MPI")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return [json.loads(pathlib_read(f"{out}.{r}")) for r in range(NP)]


def py_run(mpirun, tmp_path, data, cache, api):  # noqa: F811
    return ranks_run(mpirun, tmp_path, f"job-{api}-{cache}", SCRIPT, data, cache, api)


def pathlib_read(p):
    with open(p) as f:
        return f.read()


def test_python_loader_under_mpirun_reads_the_same_bytes_through_the_cache(mpirun, h5_data, tmp_path):  # noqa: F811
    plain = py_run(mpirun, tmp_path, h5_data, "none", "loader")
    cached = py_run(mpirun, tmp_path, h5_data, "64M", "loader")
    for r in range(NP):
        for e in range(3):
            assert cached[r][e]["samples"] == plain[r][e]["samples"], (r, e)
    # Each rank's counters: epochs 1 and 2 read nothing from the files.
    for r in range(NP):
        s0, s1, s2 = (cached[r][e]["stats"] for e in range(3))
        assert s0["bytes_read_source"] == s1["bytes_read_source"] == s2["bytes_read_source"] > 0
        assert s2["bytes_read_peers"] > s1["bytes_read_peers"] > 0
        assert s0["nodes"] == NP


def test_torch_dataset_under_mpirun_reads_the_same_bytes_through_the_cache(mpirun, h5_data, tmp_path):  # noqa: F811
    pytest.importorskip("torch")
    plain = py_run(mpirun, tmp_path, h5_data, "none", "torch")
    cached = py_run(mpirun, tmp_path, h5_data, "64M", "torch")
    assert cached == plain
    assert all(len(cached[r][e]["samples"]) == 160 // NP for r in range(NP) for e in range(3))


COMM = r"""
import hashlib, json, os, sys
from mpi4py import MPI
import dlfeed
out, data, mode = sys.argv[1:4]
world = MPI.COMM_WORLD
# Two data-parallel groups of 2 (ranks 0, 2 and 1, 3), as a trainer with 2-way model parallelism makes them.
group = world.Split(color=world.Get_rank() % 2, key=world.Get_rank())
kw = dict(batch_size=4, fields=["x", "y"], strategy="global_shuffle", mpi_comm=group)
if mode == "split":  # each rank a node of its own: windows of MPI's one-sided component over each group
    kw.update(job_cache="64M", job_cache_ranks_per_node=1)
    try:
        dlfeed.Loader(data, **kw)
        error = None
    except dlfeed.Error as e:
        error = str(e)
    with open(f"{out}.{world.Get_rank()}", "w") as f:
        json.dump({"error": error, "mpi": MPI.Get_library_version()}, f)
    sys.exit(0)
if mode != "mpi":  # each group's two ranks on this machine: one shared window per group
    kw.update(job_cache="64M", job_cache_ranks_per_node=0)
epochs = []
if mode == "torch":  # a trainer's torch.distributed spans the 4 ranks; the loader's ranks are the group's
    import torch, torch.distributed as dist
    import dlfeed.torch
    port = sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=world.Get_rank(),
                            world_size=world.Get_size())
    ds = dlfeed.torch.Dataset(data, as_dict=True, **kw)
    for e in range(3):
        group.Barrier()
        ds.set_epoch(e)
        seen = [(int(b["sample_ids"][i]), hashlib.sha256(b["x"][i].numpy().tobytes() +
                                                         b["y"][i].numpy().tobytes()).hexdigest())
                for b in torch.utils.data.DataLoader(ds, batch_size=None) for i in range(len(b["x"]))]
        epochs.append({"samples": seen, "stats": ds.loader.job_cache_stats()})
    loader = ds.loader
    dist.destroy_process_group()
else:
    loader = dlfeed.Loader(data, **kw)
    for e in range(3):
        group.Barrier()  # the group's ranks start each epoch together
        seen = [(int(b.sample_ids[i]), hashlib.sha256(b["x"][i].tobytes() + b["y"][i].tobytes()).hexdigest())
                for b in loader.iter_epoch(e) for i in range(len(b))]
        epochs.append({"samples": seen, "stats": loader.job_cache_stats()})
with open(f"{out}.{world.Get_rank()}", "w") as f:
    st = dlfeed.decode_state(loader.state())
    json.dump({"rank": st["rank"], "world_size": st["world_size"], "epochs": epochs}, f)
"""


@pytest.mark.parametrize("mode", ["mpi", "cache", "torch"])
def test_an_mpi4py_communicator_makes_the_job(mpirun, h5_data, tmp_path, mode):  # noqa: F811
    """mpi_comm=: the loader's ranks are a communicator's (two groups of 2 out of 4 ranks): each
    group reads the whole dataset once an epoch, its 2 ranks disjoint halves, as 2 ranks of
    rank=/world_size= would; with job_cache, each group's later epochs read nothing from the files;
    dlfeed.torch.Dataset takes its rank and world size from the communicator, not from
    torch.distributed's 4 ranks."""
    import socket
    pytest.importorskip("mpi4py")
    if mode == "torch":
        pytest.importorskip("torch")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runs = ranks_run(mpirun, tmp_path, f"comm-{mode}", COMM, h5_data, mode, port)
    import dlfeed
    for r in range(NP):
        assert (runs[r]["rank"], runs[r]["world_size"]) == (r // 2, 2)
        ref = dlfeed.Loader(h5_data, batch_size=4, fields=["x", "y"], strategy="global_shuffle", rank=r // 2,
                            world_size=2)
        for e in range(3):
            want = [int(i) for b in ref.iter_epoch(e) for i in b.sample_ids]
            assert [sid for sid, _ in runs[r]["epochs"][e]["samples"]] == want, (r, e)
        # The two groups read alike: world ranks r and r ^ 1 are the same rank of their groups.
        assert [e["samples"] for e in runs[r]["epochs"]] == [e["samples"] for e in runs[r ^ 1]["epochs"]]
    if mode != "mpi":
        for r in range(NP):
            s = [runs[r]["epochs"][e]["stats"] for e in range(3)]
            assert s[0]["nodes"] == 1 and s[2]["bytes_read_source"] == s[0]["bytes_read_source"] > 0, s


def test_a_split_communicators_one_sided_windows_are_refused_on_open_mpi_4(mpirun, h5_data, tmp_path):  # noqa: F811
    """Open MPI 4 maps the one-sided windows of communicators split together on one machine to the
    same memory (open-mpi/ompi#9492): two groups' job caches read each other's bytes, silently. A
    job cache over such a communicator that needs those windows is refused on every rank."""
    pytest.importorskip("mpi4py")
    runs = ranks_run(mpirun, tmp_path, "comm-split", COMM, h5_data, "split", 0)
    for r in range(NP):
        if "Open MPI v4" in runs[r]["mpi"] or "Open MPI v3" in runs[r]["mpi"]:
            assert runs[r]["error"] and "ompi#9492" in runs[r]["error"] and "mpi_comm=" in runs[r]["error"]
        else:
            assert runs[r]["error"] is None


COMM_AGAIN = r"""
import json, sys
from mpi4py import MPI
import dlfeed
out, data = sys.argv[1:3]
world = MPI.COMM_WORLD
r = world.Get_rank()
g = world.Split(r % 2, r)  # {0, 2} and {1, 3}
first = dlfeed.Loader(data, fields=["x"], batch_size=4, mpi_comm=g)
g.Free()
g2 = world.Split(r // 2, r)  # {0, 1} and {2, 3}: mpi4py gives it the handle g had
loader = dlfeed.Loader(data, fields=["x"], batch_size=4, mpi_comm=g2)
ids = [int(i) for b in loader for i in b.sample_ids]
st = dlfeed.decode_state(loader.state())
with open(f"{out}.{r}", "w") as f:
    json.dump({"rank": st["rank"], "world_size": st["world_size"], "want": [g2.Get_rank(), g2.Get_size()],
               "group_ids": sorted(sum(g2.allgather(ids), []))}, f)
"""


def test_a_communicator_split_again_is_not_taken_for_the_one_freed(mpirun, h5_data, tmp_path):  # noqa: F811
    """A group freed and split again can get the freed one's handle: the loader's ranks are the new
    group's (found by outside testing: the old group's, half the dataset twice in each new group)."""
    pytest.importorskip("mpi4py")
    for r, got in enumerate(ranks_run(mpirun, tmp_path, "again", COMM_AGAIN, h5_data)):
        assert [got["rank"], got["world_size"]] == got["want"], (r, got)
        assert got["group_ids"] == list(range(160)), "each group reads every sample once"


REPEATS = r"""
import hashlib, json, os, pathlib, sys, time
import dlfeed
out, data, cache = sys.argv[1:4]
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
# An explicit order read every epoch: every sample once, then the last 80 three times more.
kw = dict(batch_size=4, fields=["x", "y"], strategy="explicit", indices=list(range(160)) + list(range(80, 160)) * 3)


def barrier(tag):  # the ranks start each epoch together, as a trainer's all-reduce keeps them
    pathlib.Path(f"{out}.{tag}.{rank}").touch()
    while not all(os.path.exists(f"{out}.{tag}.{r}") for r in range(size)):
        time.sleep(0.01)


def epochs(name, loader):
    got = []
    for e in range(3):
        barrier(f"{name}{e}")
        seen = [(int(b.sample_ids[i]), hashlib.sha256(b["x"][i].tobytes() + b["y"][i].tobytes()).hexdigest())
                for b in loader.iter_epoch(e) for i in range(len(b))]
        got.append({"samples": seen, "stats": loader.job_cache_stats()})
    loader.close()
    return got


plain = epochs("plain", dlfeed.Loader(data, rank=rank, world_size=size, **kw))
cached = epochs("cached", dlfeed.Loader(data, job_cache=int(cache), job_cache_ranks_per_node=1, **kw))
with open(f"{out}.{rank}", "w") as f:
    json.dump({"plain": plain, "cached": cached}, f)
"""


def test_a_cache_smaller_than_the_dataset_holds_what_an_order_reads_most(mpirun, h5_data, tmp_path):  # noqa: F811
    """An explicit order that reads the last half of the samples 4 times an epoch: with room for
    half the dataset, the job holds that half (read most), not the half read first, so each
    later epoch reads only the other half's 80 reads from the files (first-read order: 320)."""
    # Each rank its own node, with room for 20 samples: x (1024 bytes) and y (8), each slot with its 8-byte stamp.
    per_rank = 20 * ((8 + 1024) + (8 + 8))
    runs = ranks_run(mpirun, tmp_path, "repeats", REPEATS, h5_data, per_rank)
    for r in range(NP):
        for e in range(3):
            assert runs[r]["cached"][e]["samples"] == runs[r]["plain"][e]["samples"], (r, e)
    stats = [[runs[r]["cached"][e]["stats"] for e in range(3)] for r in range(NP)]
    assert sum(s[2]["held_bytes"] for s in stats) // NP == 80 * (1024 + 8)
    for e in (1, 2):
        source = sum(s[e]["bytes_read_source"] - s[e - 1]["bytes_read_source"] for s in stats)
        assert source == 80 * (1024 + 8), f"epoch {e}: {source} bytes from the files"


RESUME = r"""
import hashlib, json, os, pathlib, sys, time
import dlfeed
out, data, mode = sys.argv[1:4]
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
E, K = 2, 3  # the checkpoint: K steps into epoch E, of a job of `size` ranks (same) or 2 (elastic)
kw = dict(batch_size=4, fields=["x", "y"], strategy="global_shuffle")
w = size if mode == "same" else 2
ck = dlfeed.Loader(data, rank=rank % w, world_size=w, **kw)
it = iter(ck.iter_epoch(E))
for _ in range(K):
    next(it)
state = ck.state()
del it
ck.close()


def barrier(tag):  # the ranks start each epoch together, as a trainer's all-reduce keeps them
    pathlib.Path(f"{out}.{tag}.{rank}").touch()
    while not all(os.path.exists(f"{out}.{tag}.{r}") for r in range(size)):
        time.sleep(0.01)


def resumed(name, loader):
    loader.restore(state)
    got = []
    for e in range(E, E + 3):
        barrier(f"{name}{e}")
        seen = sorted(hashlib.sha256(b["x"][i].tobytes() + b["y"][i].tobytes()).hexdigest()
                      for b in loader.iter_epoch(e) for i in range(len(b)))
        got.append({"samples": seen, "stats": loader.job_cache_stats()})
    loader.close()
    return got


plain = resumed("plain", dlfeed.Loader(data, rank=rank, world_size=size, **kw))
cached = resumed("cached", dlfeed.Loader(data, job_cache="64M", job_cache_ranks_per_node=1, **kw))
with open(f"{out}.{rank}", "w") as f:
    json.dump({"plain": plain, "cached": cached}, f)
"""


@pytest.mark.parametrize("mode", ["same", "elastic"])
def test_a_job_resumed_mid_epoch_fills_the_cache_from_where_it_starts(mpirun, h5_data, tmp_path, mode):  # noqa: F811
    """A checkpoint's restore() at epoch 2, step 3 (of the same world size, or of 2 ranks
    for 4): the plan starts there, so the rest of that epoch and the next read each
    extent from the files once in the job, and the epoch after reads none."""
    got = ranks_run(mpirun, tmp_path, f"resume-{mode}", RESUME, h5_data, mode)
    for r in range(NP):
        assert [e["samples"] for e in got[r]["cached"]] == [e["samples"] for e in got[r]["plain"]], r
    assert sum(len(got[r]["cached"][0]["samples"]) for r in range(NP)) == 160 - 3 * 4 * (NP if mode == "same" else 2)
    stats = [[e["stats"] for e in got[r]["cached"]] for r in range(NP)]
    for r in range(NP):
        assert stats[r][2]["bytes_read_source"] == stats[r][1]["bytes_read_source"], (r, stats[r])
    # Every extent came from the files once in the job: the rest of epoch 2, then the 3 steps read before the restore.
    assert sum(stats[r][2]["bytes_read_source"] for r in range(NP)) == stats[0][0]["dataset_bytes"] > 0
    assert all(stats[r][1]["bytes_read_source"] > stats[r][0]["bytes_read_source"] for r in range(NP))


RAISES = """
import os, sys
import dlfeed
data, mode = sys.argv[1], sys.argv[2]
kw = dict(job_cache="64M", job_cache_ranks_per_node=1) if mode == "cache" else dict(mpi=True)
loader = dlfeed.Loader(data, fields=["x", "y"], batch_size=4, strategy="global_shuffle", **kw)
for b in loader.iter_epoch(0):
    pass
if os.environ["OMPI_COMM_WORLD_RANK"] == "0":
    raise RuntimeError("rank 0 fails here")
# The others go on to the job's next collective (here a second loader's: rank 0 indexes for the job).
dlfeed.Loader(data, fields=["x", "y"], batch_size=4, mpi=True)
"""


def two_ranks_run(mpirun, script, text, args, hung):  # noqa: F811
    """Runs Python `text` (written to `script`) on 2 ranks with `args`; fails the test with `hung` past
    120 s, skips it when this dlfeed module has no MPI."""
    import os
    import subprocess
    import sys
    script.write_text(text)
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none", PYTHONPATH=os.pathsep.join(sys.path))
    try:
        proc = subprocess.run([*mpirun, "-np", "2", sys.executable, str(script), *map(str, args)],
                              capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(hung)
    if "needs dlfeed built with MPI" in proc.stderr:
        pytest.skip("this dlfeed module was built without MPI")
    return proc


@pytest.mark.parametrize("mode", ["mpi", "cache"])
def test_an_uncaught_exception_on_one_rank_ends_the_job(mpirun, h5_data, tmp_path, mode):  # noqa: F811
    """A rank that dies of an uncaught exception aborts the job (after its traceback): its peers, waiting in
    a collective for it, would otherwise wait until the walltime, and its own exit would wait in the
    job cache's collective shutdown."""
    import time
    start = time.monotonic()
    proc = two_ranks_run(mpirun, tmp_path / "raises.py", RAISES, [h5_data, mode],
                         hung="the job hung after rank 0's exception")
    assert proc.returncode != 0 and "RuntimeError: rank 0 fails here" in proc.stderr, proc.stderr[-3000:]
    assert time.monotonic() - start < 60


OTHER_PATHS = """
import os, sys, numpy as np, dlfeed
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
path = os.path.join(sys.argv[1], "a" if rank == 0 else "b")
os.makedirs(path, exist_ok=True)
np.save(os.path.join(path, "x.npy"), np.full((6, 2), rank, np.float32))
kw = {"job_cache": "16M"} if sys.argv[2] == "cache" else {"mpi": True}
dlfeed.Loader(path, batch_size=3, **kw)
"""


@pytest.mark.parametrize("mode", ["mpi", "cache"])
def test_a_rank_naming_another_dataset_than_the_root_is_refused(mpirun, tmp_path, mode):  # noqa: F811
    """Ranks that share one index read what the root indexed: a rank naming other paths would read the
    root's files as if they were its own (rank 1 asked for b/ and got a/'s values). It is an error naming
    both."""
    proc = two_ranks_run(mpirun, tmp_path / "other_paths.py", OTHER_PATHS, [tmp_path, mode], hung="the job hung")
    assert proc.returncode != 0
    assert f"rank 1 names the dataset {tmp_path}/b, but rank 0 (indexing for the job) names {tmp_path}/a:" \
        in proc.stderr, \
        proc.stderr[-3000:]


CAUGHT = """
import os, sys, numpy as np, dlfeed
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
for name in ("a", "b"):
    os.makedirs(os.path.join(sys.argv[1], name), exist_ok=True)
    np.save(os.path.join(sys.argv[1], name, "x.npy"), np.arange(12, dtype=np.float32).reshape(6, 2))
kw = {"job_cache": "16M"} if sys.argv[2] == "cache" else {"mpi": True}
try:
    loader = dlfeed.Loader(os.path.join(sys.argv[1], "a" if rank == 0 else "b"), batch_size=3, **kw)
except Exception as e:
    print(f"rank {rank} caught: {e}", file=sys.stderr)
    loader = dlfeed.Loader(os.path.join(sys.argv[1], "a"), batch_size=3, **kw)
total = sum(float(np.asarray(b[0]).sum()) for b in loader.iter_epoch(0))
print(f"rank {rank} total {total}")
"""


@pytest.mark.parametrize("mode", ["mpi", "cache"])
def test_a_rank_that_cannot_take_the_index_fails_every_ranks_create(mpirun, tmp_path, mode):  # noqa: F811
    """When one rank cannot take the shared index (it names other paths), every rank's create fails: a
    trainer that catches the error and makes the loader again finds its peers doing the same, where the
    root alone succeeding went on to read while the other rank waited for it in a second create."""
    proc = two_ranks_run(mpirun, tmp_path / "caught.py", CAUGHT, [tmp_path, mode],
                         hung="the ranks' collectives got out of step after a caught error")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 1 caught: rank 1 names the dataset" in proc.stderr, proc.stderr[-3000:]
    assert "rank 0 caught: rank 1 could not take the job's shared index" in proc.stderr, proc.stderr[-3000:]
    # mpirun may pass on one rank's line before the other's newline ("rank 0 total 27.0rank 1 total 39.0").
    totals = {int(r): float(t) for r, t in re.findall(r"rank (\d+) total (\d+\.\d+)", proc.stdout)}
    assert sorted(totals) == [0, 1] and sum(totals.values()) == 66.0, proc.stdout  # a/x.npy's 0..11 once


REWRITTEN = """
import os, sys, time, numpy as np, dlfeed
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
d = sys.argv[1]
def wait_for(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.01)
loader = dlfeed.Loader(d, batch_size=2, job_cache=sys.argv[3], resident="off", strategy="global_shuffle",
                       max_open_files=int(sys.argv[2]))
list(loader)
open(os.path.join(d, f"done{rank}"), "w").close()
if rank == 0:
    wait_for("done1")
    p = os.path.join(d, "x_001.npy")
    st = os.stat(p)
    with open(p, "r+b") as f:  # new bytes, the same size, then the mtime put back (cp -p, rsync -t)
        f.seek(-8 * 64 * 8, 2)
        f.write(np.full(8 * 64, 99.0).tobytes())
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    open(os.path.join(d, "rewritten"), "w").close()
wait_for("rewritten")
try:
    vals = sorted({float(v) for b in loader for v in np.asarray(b[0]).ravel()})
    print(f"rank {rank} read {vals}")
except Exception as e:
    print(f"rank {rank} error: {e}")
"""


@pytest.mark.parametrize("max_open,cache", [(0, "16M"), (1, "8K")])
def test_a_file_rewritten_with_its_mtime_put_back_is_an_error_with_the_job_cache(mpirun, tmp_path,  # noqa: F811
                                                                                 max_open, cache):
    """Without the cache such a file is indexed again and read on; with it, bytes the cache kept from epoch 0
    were served beside the file's new ones (a mix of 1.0 and 99.0, or only old values), in silence. An
    error naming the file instead: at the epoch's start for a file held open, at its reopen for one closed
    meanwhile (max_open_files=1, a cache of a third of the files: the rest is read from them again)."""
    for f in range(3):
        np.save(tmp_path / f"x_{f:03d}.npy", np.full((8, 64), float(f)))
    proc = two_ranks_run(mpirun, tmp_path / "rewritten.py", REWRITTEN, [tmp_path, max_open, cache],
                         hung="the job hung")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert f"rank {r} error: " in proc.stdout and "x_001.npy" in proc.stdout, proc.stdout
    assert "change time" in proc.stdout and " read [" not in proc.stdout, proc.stdout


OTHER_FIELDS = """
import os, sys, dlfeed
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
kw = {"job_cache": "16M"} if sys.argv[2] == "cache" else {"mpi": True}
try:
    dlfeed.Loader(sys.argv[1], fields=["x", "y"] if rank == 0 else ["x"], batch_size=4, **kw)
except dlfeed.InvalidArgumentError as e:
    print(f"rank {rank} caught: {e}")
try:  # a rank's own error before the job's collectives: every rank's
    dlfeed.Loader(sys.argv[1], fields=["x"], batch_size=4, world_size=3 if rank == 1 else 2, **kw)
except dlfeed.InvalidArgumentError as e:
    print(f"rank {rank} caught again: {e}")
try:  # another parameter the order reads: samples read twice or never, before the ranks compared it
    dlfeed.Loader(sys.argv[1], fields=["x"], batch_size=4, strategy="block_shuffle",
                  block_size=8 if rank == 1 else 4, **kw)
except dlfeed.InvalidArgumentError as e:
    print(f"rank {rank} caught a third time: {e}")
"""


@pytest.mark.parametrize("mode", ["mpi", "cache"])
def test_ranks_making_other_loaders_are_an_error_on_every_rank(mpirun, h5_data, tmp_path, mode):  # noqa: F811
    """A rank whose loader had other fields than rank 0's hung in create (one index broadcast per field). The
    ranks compare the loader's settings first: an error on every rank naming both."""
    proc = two_ranks_run(mpirun, tmp_path / "other_fields.py", OTHER_FIELDS, [h5_data, mode], hung="the job hung")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert f"rank {r} caught: fields is '[\"x\", \"y\"]' on rank 0 but '[\"x\"]' on rank 1: every rank of " \
               "the job makes the same loaders" in proc.stdout, proc.stdout
    for r in range(2):
        assert f"rank {r} caught again: this rank's error is 'none' on rank 0 but " in proc.stdout, proc.stdout
    assert "world_size=3 but the MPI job has 2 ranks' on rank 1" in proc.stdout
    for r in range(2):
        assert f"rank {r} caught a third time: order is 'strategy block_shuffle seed 0 drop_last 0 block_size 4 " \
               "window 16' on rank 0 but 'strategy block_shuffle seed 0 drop_last 0 block_size 8 window 16' on " \
               "rank 1" in proc.stdout, proc.stdout


WORKERS = """
import sys, torch, dlfeed.torch
ds = dlfeed.torch.Dataset(sys.argv[1], batch_size=4, fields=["x", "y"], job_cache="64M")
for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2):
    pass
"""


def test_job_cache_in_dataloader_workers_is_a_clear_error(mpirun, h5_data, tmp_path):  # noqa: F811
    """A DataLoader worker of a rank is no rank of the job: making the job cache there is refused, saying
    where to make it, not a crash inside MPI_Init_thread."""
    pytest.importorskip("torch")
    proc = two_ranks_run(mpirun, tmp_path / "workers.py", WORKERS, [h5_data], hung="the job hung")
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "child of the one mpirun or srun started" in proc.stderr and "num_workers=0" in proc.stderr
    assert "MPI_Init_thread" not in proc.stderr, proc.stderr[-3000:]


def test_job_cache_without_mpirun_is_a_clear_error(h5_data):
    import dlfeed
    if not getattr(dlfeed._dlfeed, "has_mpi", False):
        with pytest.raises(RuntimeError, match="built with MPI"):
            dlfeed.Loader(h5_data, fields=["x"], job_cache="1G")
        return
    with pytest.raises(dlfeed.Error, match="mpirun or srun"):
        dlfeed.Loader(h5_data, fields=["x"], job_cache="1G")


def test_job_cache_keyword_takes_byte_counts():
    from dlfeed import _options
    assert _options.byte_count("64G", "job_cache") == 64 << 30
    assert _options.byte_count(4096, "job_cache") == 4096
    with pytest.raises(Exception, match="job_cache='lots'"):
        _options.byte_count("lots", "job_cache")


def test_mpi_comm_takes_a_communicator(h5_data):
    import dlfeed
    if not getattr(dlfeed._dlfeed, "has_mpi", False):
        pytest.skip("this dlfeed module was built without MPI")
    with pytest.raises(TypeError, match="expected an mpi4py communicator"):
        dlfeed.Loader(h5_data, mpi_comm=object())
    with pytest.raises(ValueError, match="mpi_comm= with mpi=False"):
        dlfeed.Loader(h5_data, mpi_comm=object(), mpi=False)


DLIO_YAML = """model: jc
framework: pytorch
workflow:
  generate_data: True
  train: True
dataset:
  data_folder: {data}
  format: npz
  num_files_train: 8
  num_samples_per_file: 8
  record_length: 4096
reader:
  data_loader: pytorch
  batch_size: 2
  sample_shuffle: seed
train:
  epochs: 3
  computation_time: 0
"""


def test_dlio_under_mpirun_caches_its_training_reads(mpirun, dlfeed, tmp_path):  # noqa: F811
    import os
    import subprocess
    config = tmp_path / "jc.yaml"
    config.write_text(DLIO_YAML.format(data=tmp_path / "data"))
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    proc = subprocess.run([*mpirun, "-np", str(NP), dlfeed.binary, "dlio", "--cache", "16M",
                           "--cache-ranks-per-node", "1", str(config), f"++workload.output.folder={tmp_path}/out",
                           f"++workload.checkpoint.checkpoint_folder={tmp_path}/ckpt"],
                          capture_output=True, text=True, timeout=300, env=env)
    if "built without MPI" in proc.stderr:
        pytest.skip("this dlfeed was built without MPI")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = re.findall(r"job cache: epoch (\d): ([0-9.]+) MiB from the files, ([0-9.]+) MiB from other nodes", proc.stdout)
    assert [int(e) for e, _, _ in lines] == [0, 1, 2], proc.stdout
    assert float(lines[0][1]) > 0
    for _, files, peers in lines[1:]:
        assert float(files) == 0 and float(peers) > 0, proc.stdout
    assert (tmp_path / "out" / "summary.json").exists()


SHM_TOO_SMALL = """
import os, sys, dlfeed
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
try:
    kw = {"job_cache_ranks_per_node": int(sys.argv[2])} if len(sys.argv) > 2 else {}
    dlfeed.Loader(sys.argv[1], fields=["x"], batch_size=4, job_cache="64T", **kw)
    print(f"rank {rank} made it")
except dlfeed.Error as e:
    print(f"rank {rank} caught {type(e).__name__}: {e}")
"""


@pytest.mark.parametrize("per_node", [[], [1]])
def test_a_cache_larger_than_dev_shm_is_an_error_on_every_rank(mpirun, h5_data, tmp_path, per_node):  # noqa: F811
    """job_cache="64G" on a node whose /dev/shm had 24 GB free ended the job inside MPI_Win_allocate_shared
    (MPI_ERRORS_ARE_FATAL) with no dlfeed error; with nodes of one rank (MPI_Win_allocate, in /dev/shm too
    when the job is on one node) rank 0 failed and the others never came back: the room is checked first,
    an error on every rank naming the sizes and what to do."""
    proc = two_ranks_run(mpirun, tmp_path / "shm.py", SHM_TOO_SMALL, [h5_data, *per_node], hung="the job hung")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert f"rank {r} caught ResourceError: MPI job cache: this node's ranks share " in proc.stdout, proc.stdout
    assert "bytes of memory windows, and /dev/shm has " in proc.stdout
    assert "job_cache_folder=" in proc.stdout
