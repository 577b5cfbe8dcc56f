# SPDX-License-Identifier: Apache-2.0
"""dlfeed.torch: training, zero copy, resume, torch.distributed (gloo, 2
processes), DataLoader workers, pin_memory."""
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import dlfeed
import dlfeed.torch as dtorch
from py_datasets import FORMATS, loader_kwargs, write_dataset

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("fmt", FORMATS)
def test_tiny_model_trains_for_an_epoch(learnable, fmt):
    root, _, _ = learnable[fmt]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    ds = dtorch.Dataset(root, batch_size=8, strategy="global_shuffle", seed=1, **loader_kwargs(fmt))
    losses = []
    for x, y in ds:
        assert x.dtype == torch.float32 and x.shape[1:] == (8, 8) and y.dtype == torch.int64
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert len(losses) == 32 and ds.epoch == 1
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses


def test_torch_tensors_share_dlfeed_memory(learnable):
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=16)
    batch = next(iter(loader))
    x = torch.from_dlpack(batch.tensor("x"))
    assert x.data_ptr() == batch["x"].ctypes.data == batch.tensor("x").data_ptr
    y = dtorch.to_torch(batch, "y")
    assert y.data_ptr() == batch["y"].ctypes.data and y.dtype == torch.int64
    single = dlfeed.Loader(root, fields="x", batch_size=16)
    b = next(iter(single))
    assert torch.from_dlpack(b).data_ptr() == b["x"].ctypes.data  # a one-field batch is a DLPack tensor
    del batch, loader  # the tensors keep the memory alive
    assert float(x.sum()) == pytest.approx(float(x.clone().sum()))


def test_state_dict_resumes_mid_epoch(learnable):
    root, _, _ = learnable["hdf5"]
    kw = dict(batch_size=16, strategy="global_shuffle", seed=2, as_dict=True, **loader_kwargs("hdf5"))
    reference = [b["sample_ids"] for b in dtorch.Dataset(root, **kw)]
    ds = dtorch.Dataset(root, **kw)
    got = []
    for i, b in enumerate(ds):
        got.append(b["sample_ids"])
        if i == 6:
            break
    sd = ds.state_dict()
    assert sd["epoch"] == 0 and sd["loader_state"] is not None
    fresh = dtorch.Dataset(root, **kw)
    fresh.load_state_dict(sd)
    got.extend(b["sample_ids"] for b in fresh)
    assert torch.equal(torch.cat(got), torch.cat(reference))
    assert fresh.epoch == 1 and fresh.state_dict()["loader_state"] is None
    # A Dataset whose loader exists (it iterated an epoch): state_dict() right after
    # load_state_dict() is the position given, not the loader's own (found by outside
    # testing: it gave the epoch with no position, and a resume read it again whole).
    used = dtorch.Dataset(root, **kw)
    for _ in used:
        pass
    used.load_state_dict(sd)
    again = used.state_dict()
    assert again["epoch"] == 0 and again["loader_state"] == sd["loader_state"]
    third = dtorch.Dataset(root, **kw)
    third.load_state_dict(again)
    rest = [b["sample_ids"] for b in third]
    assert torch.equal(torch.cat(got[:7] + rest), torch.cat(reference))


def test_pin_memory_without_cuda_warns_and_yields(learnable):
    root, _, _ = learnable["npz"]
    ds = dtorch.Dataset(root, batch_size=64, pin_memory=True, **loader_kwargs("npz"))
    with pytest.warns(RuntimeWarning, match="pin_memory"):
        batches = list(ds)
    assert len(batches) == 4


DIST_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    import dlfeed.torch
    rank, init, root, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    ds = dlfeed.torch.Dataset(root, fields=["records", "labels"], batch_size=10,
                              strategy="global_shuffle", seed=7, as_dict=True)
    assert (ds.rank, ds.world_size) == (rank, 2)
    ids = torch.cat([b["sample_ids"] for b in ds])
    n = torch.tensor([len(ids)])
    dist.all_reduce(n)  # the group works, and both ranks read the same number
    torch.save(ids, out)
    dist.destroy_process_group()
""")


def test_torch_distributed_two_ranks_read_disjoint_covering_shards(learnable, tmp_path):
    root, _, _ = learnable["hdf5"]
    script = tmp_path / "rank.py"
    script.write_text(DIST_SCRIPT)
    init = f"file://{tmp_path}/pg"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(root), str(tmp_path / f"ids{r}.pt")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
    a, b = (torch.load(tmp_path / f"ids{r}.pt") for r in range(2))
    assert len(a) == len(b) == 128
    assert not set(a.tolist()) & set(b.tolist())
    assert sorted(a.tolist() + b.tolist()) == list(range(256))


def test_dataloader_workers_split_without_duplicates(tmp_path):
    root, _, _ = write_dataset("npz", tmp_path / "d", files=5, per_file=49)  # 245 samples: odd
    ds = dtorch.Dataset(root, batch_size=16, as_dict=True, **loader_kwargs("npz"))
    assert sum(1 for _ in ds) == 16  # this process used dlfeed (threads) before the workers fork
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)  # fork
    ids = []
    for b in dl:
        assert len(b["x"]) == len(b["sample_ids"]) == len(b["y"])
        np.testing.assert_array_equal(b["y"].numpy(), b["sample_ids"].numpy() % 10)
        ids.extend(b["sample_ids"].tolist())
    assert sorted(ids) == list(range(245))


class _BudgetRecording(dtorch.Dataset):
    """Writes each process's loader's memory budget to out/<pid>."""
    out = None

    def _get_loader(self, rank, world):
        loader = super()._get_loader(rank, world)
        (self.out / str(os.getpid())).write_text(str(loader.stats().memory_budget))
        return loader


def test_dataloader_workers_share_the_machines_memory_budget(tmp_path):
    """Each worker makes a loader of its own: with memory_budget left to the
    machine, two workers get half of it each, not all of it each."""
    root, _, _ = write_dataset("npz", tmp_path / "d", files=4, per_file=16)
    out = tmp_path / "budgets"
    out.mkdir()
    ds = _BudgetRecording(root, batch_size=16, as_dict=True, **loader_kwargs("npz"))
    ds.out = out
    machine, why = dlfeed.machine_memory_budget()
    assert "a quarter of" in why or "256 MiB" in why
    assert sum(1 for _ in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)) == 4
    budgets = [int(f.read_text()) for f in out.iterdir() if f.name != str(os.getpid())]
    assert len(budgets) == 2
    for b in budgets:  # MemAvailable moves a little between the reads
        assert max(256 << 20, machine // 2) * 0.8 <= b <= max(256 << 20, machine // 2) * 1.2, (b, machine)
    given = _BudgetRecording(root, batch_size=16, memory_budget=300 << 20, **loader_kwargs("npz"))
    given.out = out
    for f in out.iterdir():
        f.unlink()
    assert sum(1 for _ in torch.utils.data.DataLoader(given, batch_size=None, num_workers=2)) == 4
    assert [int(f.read_text()) for f in out.iterdir()] == [300 << 20] * 2  # a given budget is kept


def test_len_in_the_training_process_makes_no_loader_there(tmp_path):
    """len(DataLoader(ds, num_workers=2)) runs in the training process, whose workers read: it makes no
    loader there to keep (one would hold this small dataset in memory, read at create, and its first
    batches' buffers, all unused)."""
    root, _, _ = write_dataset("npz", tmp_path / "d", files=5, per_file=49)  # 245 samples
    out = tmp_path / "made"
    out.mkdir()
    ds = _BudgetRecording(root, batch_size=16, **loader_kwargs("npz"))
    ds.out = out
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert len(dl) == len(ds) == 16
    assert not (out / str(os.getpid())).exists()  # no loader of this process
    assert sum(1 for _ in dl) == 16 and len(list(out.iterdir())) == 2  # the workers' own
    assert not (out / str(os.getpid())).exists()
    # Counted as the loader itself counts: the last batch dropped, a shard, a shard's tail dropped; and
    # after a direct iteration, by the loader it made.
    for kw in (dict(drop_last_batch=True), dict(rank=1, world_size=2),
               dict(rank=1, world_size=2, shard_drop_last=True, strategy="global_shuffle")):
        d = dtorch.Dataset(root, batch_size=16, **kw, **loader_kwargs("npz"))
        want = len(dlfeed.Loader(root, batch_size=16, **kw, **loader_kwargs("npz")))
        assert len(d) == want and sum(1 for _ in d) == want and len(d) == want, kw


def test_a_dataset_whose_loader_was_closed_makes_a_new_one(tmp_path):
    """The fork rules ask to close() the parent's loader before a DataLoader forks its workers;
    the Dataset then makes a new loader when the parent reads or counts again."""
    root, _, _ = write_dataset("npz", tmp_path / "d", files=2, per_file=40)
    ds = dtorch.Dataset(root, batch_size=16, **loader_kwargs("npz"))
    for i, _ in enumerate(ds):
        if i == 1:
            break  # a validation pass cut short
    ds.loader.close()
    assert ds.loader.closed is False, "a new loader"
    ds.loader.close()
    assert sum(1 for _ in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)) == 5
    assert len(ds) == 5 and sum(1 for _ in ds) == 5


# -- DataLoader: epochs, workers, batching ------------------------------------
N_EPOCH_TEST = 245  # 5 files of 49: odd, so the workers' parts differ in length


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    root, _, _ = write_dataset("npz", tmp_path_factory.mktemp("odd") / "d", files=5, per_file=49)
    return root


def shuffled(root, **kw):
    return dtorch.Dataset(root, batch_size=16, strategy="global_shuffle", seed=3, as_dict=True,
                          **loader_kwargs("npz"), **kw)


def reference_order(root, epoch, workers):
    """The ids a DataLoader over shuffled() yields in `epoch`, from dlfeed.Loader
    alone: the batches a direct iteration gives, worker w of K taking the run
    [w*n//K, (w+1)*n//K) of its n batches, and the DataLoader taking one batch
    from each worker in turn."""
    kw = dict(batch_size=16, strategy="global_shuffle", seed=3, **loader_kwargs("npz"))
    batches = [[int(i) for i in b.sample_ids] for b in dlfeed.Loader(root, **kw).iter_epoch(epoch)]
    if workers == 0:
        return [i for b in batches for i in b]
    n = len(batches)
    parts = [batches[w * n // workers:(w + 1) * n // workers] for w in range(workers)]
    out = []
    for k in range(max(map(len, parts))):
        for p in parts:
            out.extend(p[k] if k < len(p) else [])
    return out


def epoch_orders(ds, dl, epochs, set_epoch=None):
    out = []
    for e in range(epochs):
        if set_epoch is not None:
            ds.set_epoch(set_epoch[e])
        ids = []
        for b in dl:
            assert b["x"].shape[1:] == (8, 8) and len(b["x"]) == len(b["sample_ids"]) <= 16
            ids.extend(b["sample_ids"].tolist())
        assert sorted(ids) == list(range(N_EPOCH_TEST))  # every sample exactly once
        out.append(ids)
    return out


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_each_dataloader_iteration_is_the_next_epoch(odd, workers, persistent):
    def run():
        ds = shuffled(odd)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                         persistent_workers=persistent)
        orders = epoch_orders(ds, dl, 3)
        assert ds.epoch == 3
        return orders

    orders = run()
    assert len({tuple(o) for o in orders}) == 3  # a new order each epoch, without set_epoch
    for e, o in enumerate(orders):
        assert o == reference_order(odd, e, workers)  # epoch e's order, as the seed defines it
    assert run() == orders  # deterministic per seed: a second run repeats it


def test_workers_continue_from_direct_iteration_and_set_epoch_wins(odd):
    ds = shuffled(odd)
    direct = [int(i) for b in ds for i in b["sample_ids"]]
    assert direct == reference_order(odd, 0, 0) and ds.epoch == 1
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert epoch_orders(ds, dl, 1) == [reference_order(odd, 1, 2)]
    assert ds.epoch == 2
    # set_epoch decides the next iteration: again and again the same epoch,
    # then counting on from the one set.
    assert epoch_orders(ds, dl, 2, set_epoch=[5, 5]) == [reference_order(odd, 5, 2)] * 2
    ds.set_epoch(1)
    assert epoch_orders(ds, dl, 2) == [reference_order(odd, e, 2) for e in (1, 2)]
    assert ds.epoch == 3


def _slow_second_worker(worker_id):
    if worker_id == 1:
        time.sleep(1.0)  # still starting when the first batch arrives (as spawn, or a slow worker_init_fn)


@pytest.mark.parametrize("persistent", [False, True])
def test_set_epoch_during_an_iteration_leaves_it_to_its_late_workers(odd, persistent):
    # A worker that joined after set_epoch() took the epoch set, not the
    # running one: half the batches came from each, 65 samples twice.
    ds = shuffled(odd)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent,
                                     worker_init_fn=_slow_second_worker, multiprocessing_context="fork")
    ids = []
    for k, b in enumerate(dl):
        if k == 0:
            ds.set_epoch(5)
        ids.extend(b["sample_ids"].tolist())
    assert sorted(ids) == list(range(N_EPOCH_TEST))
    assert ids == reference_order(odd, 0, 2)
    assert epoch_orders(ds, dl, 1) == [reference_order(odd, 5, 2)]  # the one set, next
    assert ds.epoch == 6


def test_set_epoch_reaches_persistent_workers(odd):
    ds = shuffled(odd)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    got = epoch_orders(ds, dl, 3, set_epoch=[4, 4, 0])
    assert got == [reference_order(odd, e, 2) for e in (4, 4, 0)]
    assert epoch_orders(ds, dl, 1) == [reference_order(odd, 1, 2)]


def test_spawned_workers_share_the_epoch(odd):
    ds = shuffled(odd)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    assert epoch_orders(ds, dl, 2) == [reference_order(odd, e, 2) for e in (0, 1)]
    assert ds.epoch == 2


def test_a_dataloader_made_again_with_the_same_generator_still_moves_on(odd):
    # The same base seed for every iteration's workers: a new generation is
    # recognised because the previous one's workers had all joined.
    ds = shuffled(odd)
    orders = []
    for _ in range(2):
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         generator=torch.Generator().manual_seed(0))
        orders += epoch_orders(ds, dl, 1)
    assert orders == [reference_order(odd, e, 2) for e in (0, 1)]


def test_copies_outside_workers_count_their_own_epochs(odd):
    import copy
    import pickle

    ds = shuffled(odd)
    ds.set_epoch(4)
    for twin in (copy.deepcopy(ds), pickle.loads(pickle.dumps(ds))):
        assert twin.epoch == 4
        twin.set_epoch(9)
        assert ds.epoch == 4


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", ["default", 4])
def test_dataloader_batching_is_refused_with_the_fix(odd, workers, batch_size):
    ds = shuffled(odd)
    kw = {} if batch_size == "default" else {"batch_size": batch_size}
    dl = torch.utils.data.DataLoader(ds, num_workers=workers, **kw)
    with pytest.raises(ValueError, match=r"yields whole batches \(batch_size=16\): pass batch_size=None"):
        next(iter(dl))
    del dl


def test_dataloader_batching_with_an_own_collate_is_the_users_choice(odd):
    ds = shuffled(odd)
    dl = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=list)
    pair = next(iter(dl))
    assert len(pair) == 2 and all(b["x"].shape == (16, 8, 8) for b in pair)


def test_a_resume_position_is_refused_in_workers(odd):
    ds = shuffled(odd)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    del it
    ds.loader.close()  # no epoch running here when the workers fork (see the next test)
    fresh = shuffled(odd)
    fresh.load_state_dict(state)
    dl = torch.utils.data.DataLoader(fresh, batch_size=None, num_workers=2)
    with pytest.raises(ValueError, match="load_state_dict.*not in DataLoader workers"):
        next(iter(dl))
    del dl
    fresh.set_epoch(0)  # a whole epoch instead: fine
    assert epoch_orders(fresh, torch.utils.data.DataLoader(fresh, batch_size=None, num_workers=2), 1) == \
        [reference_order(odd, 0, 2)]


FORK_AFTER_AN_EPOCH = r"""
import os, sys
import h5py, numpy as np, torch
import dlfeed, dlfeed.torch as dtorch
path, kind = sys.argv[1], sys.argv[2]
x = np.random.default_rng(0).standard_normal((512, 64, 64)).astype(np.float32)
if kind == "hdf5":  # gzip chunks of one sample: decode is the work
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(1, 64, 64), compression="gzip")
    kw = dict(fields=["x"])
else:  # savez_compressed: deflated members
    np.savez_compressed(path, x=x)
    kw = dict(fields=["x"])
ds = dtorch.Dataset(path, batch_size=32, strategy="global_shuffle", seed=4, as_dict=True, **kw)
# A validation pass in this process, to its end, its loader kept: oneTBB's
# workers ran here and are idle, and the DataLoader's workers fork now.
val = dlfeed.Loader(path, batch_size=32, **kw)
assert sum(len(b) for b in val) == 512
ids = []
for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2):  # fork
    for i, s in zip(b["sample_ids"].tolist(), b["x"].numpy()):
        np.testing.assert_array_equal(s, x[i])
        ids.append(i)
assert sorted(ids) == list(range(512)), ids
# A plain fork, and a loader made and read in the child.
pid = os.fork()
if pid == 0:
    loader = dlfeed.Loader(path, batch_size=32, **kw)
    n = sum(len(b) for b in loader)
    os._exit(0 if n == 512 and loader.stats().threads == 1 else 1)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
print("ok")
"""


@pytest.mark.parametrize("kind", ["hdf5", "npz"])
def test_fork_workers_after_a_finished_epoch_over_compressed_data_read_every_sample(tmp_path, kind):
    # The most common pattern: validate in the parent, then train with fork
    # workers. The children inherit oneTBB's bookkeeping but none of its
    # threads; decode queued there waited forever. Bounded by a timeout, so
    # a regression fails here rather than hanging the suite.
    script = tmp_path / "fork_after.py"
    script.write_text(FORK_AFTER_AN_EPOCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    path = tmp_path / ("d.h5" if kind == "hdf5" else "d.npz")
    proc = subprocess.Popen([sys.executable, str(script), str(path), kind], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and every worker it forked
        out, _ = proc.communicate()
        pytest.fail(f"hung after a finished epoch ({kind}): {out}")
    assert proc.returncode == 0 and out.strip().endswith("ok"), out


def test_fork_workers_while_an_epoch_runs_here_get_a_clear_error(odd):
    # oneTBB's threads do not survive fork(): a worker forked while this
    # process is mid-epoch is refused with a message, never a crash.
    ds = shuffled(odd)
    it = iter(ds)
    next(it)  # the epoch is running (reading ahead) in this process
    dl = torch.utils.data.DataLoader(shuffled(odd), batch_size=None, num_workers=2,
                                     multiprocessing_context="fork")
    with pytest.raises(Exception, match="forked from pid .* while 1 dlfeed epoch.*spawn"):
        next(iter(dl))
    del dl
    ds.loader.close()
    # Once nothing runs here, fork workers work.
    ids = [i for b in torch.utils.data.DataLoader(shuffled(odd), batch_size=None, num_workers=2,
                                                  multiprocessing_context="fork") for i in b["sample_ids"].tolist()]
    assert sorted(ids) == list(range(N_EPOCH_TEST))


def test_big_endian_fields_arrive_as_their_values(tmp_path):
    # torch has no big-endian types (DLPack refused the field: BufferError ... use numpy()): a copy
    # in the machine's byte order.
    np.save(tmp_path / "x.npy", np.arange(6, dtype=">f4"))
    loader = dlfeed.Loader(tmp_path / "x.npy", batch_size=6)
    assert dlfeed.torch.to_torch(next(iter(loader)), "data").tolist() == [0, 1, 2, 3, 4, 5]
    ds = dlfeed.torch.Dataset(tmp_path / "x.npy", batch_size=3, strategy="sequential")
    assert [t.tolist() for t in ds] == [[0, 1, 2], [3, 4, 5]]
