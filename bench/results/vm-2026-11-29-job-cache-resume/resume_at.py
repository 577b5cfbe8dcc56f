# SPDX-License-Identifier: Apache-2.0
"""Bytes each rank reads from the files per epoch with the job cache, for a job that starts
at epoch FIRST, STEP steps in (a checkpoint's restore(); STEP 0: from the epoch's start).

    OMPI_MCA_btl_vader_single_copy_mechanism=none PYTHONPATH=python:build/python \
        mpirun --oversubscribe --allow-run-as-root -np 4 .venv/bin/python \
        bench/results/vm-2026-11-29-job-cache-resume/resume_at.py DATA FIRST STEP

BARRIER=1 TAG=T: the ranks wait for each other before each epoch (files DATA/.bT-...).
DATA: a folder of HDF5 files with datasets x and y (written by make_data below when it does not exist).
"""
import os
import pathlib
import sys

import dlfeed


def make_data(folder: pathlib.Path) -> None:
    import h5py
    import numpy as np
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    for f in range(4):
        with h5py.File(folder / f"part{f}.h5", "w") as h:
            h["x"] = rng.standard_normal((40, 16, 16), dtype=np.float32)
            h["y"] = rng.integers(0, 10, 40, dtype=np.int64)


data, first, step = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
if rank == 0 and not data.exists():
    make_data(data)
while not (data / "part3.h5").exists():
    pass
kw = dict(batch_size=4, fields=["x", "y"], strategy="global_shuffle")
state = None
if step > 0:  # the checkpoint, from a loader without the cache
    ck = dlfeed.Loader(str(data), rank=rank, world_size=size, **kw)
    it = iter(ck.iter_epoch(first))
    for _ in range(step):
        next(it)
    state = ck.state()
    del it
    ck.close()
loader = dlfeed.Loader(str(data), job_cache="64M", job_cache_ranks_per_node=1, **kw)
if state is not None:
    loader.restore(state)


def barrier(tag: str) -> None:
    """The ranks start each epoch together, as a trainer's all-reduce keeps them (BARRIER=1)."""
    if os.environ.get("BARRIER") != "1":
        return
    (data / f".b{tag}.{rank}").touch()
    while not all((data / f".b{tag}.{r}").exists() for r in range(size)):
        pass


prev, out = 0, []
tag = os.environ.get("TAG", "")
for e in range(first, first + 4):
    barrier(f"{tag}-{first}-{step}-{e}")
    for _ in loader.iter_epoch(e):
        pass
    s = loader.job_cache_stats()
    out.append(s["bytes_read_source"] - prev)
    prev = s["bytes_read_source"]
print(f"rank {rank} from epoch {first} step {step}: bytes from files per epoch: {out}", flush=True)
