# SPDX-License-Identifier: Apache-2.0
"""Bytes each rank reads from the files per epoch with the job cache, starting at epoch FIRST.

    OMPI_MCA_btl_vader_single_copy_mechanism=none PYTHONPATH=python:build/python \
        mpirun --oversubscribe --allow-run-as-root -np 4 .venv/bin/python \
        bench/results/vm-2026-11-29-job-cache-start/start_at.py DATA FIRST

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


data, first = pathlib.Path(sys.argv[1]), int(sys.argv[2])
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
if rank == 0 and not data.exists():
    make_data(data)
while not (data / "part3.h5").exists():
    pass
loader = dlfeed.Loader(str(data), batch_size=4, fields=["x", "y"], strategy="global_shuffle",
                       job_cache="64M", job_cache_ranks_per_node=1)
prev, out = 0, []
for e in range(first, first + 4):
    for _ in loader.iter_epoch(e):
        pass
    s = loader.job_cache_stats()
    out.append(s["bytes_read_source"] - prev)
    prev = s["bytes_read_source"]
print("rank", rank, "first epoch", first, "bytes from files per epoch:", out, flush=True)
