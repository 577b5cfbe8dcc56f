#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Mosaic Streaming and LitData for bench/object_store.py: each writes the
bench's samples in its own format (Streaming's MDS shards, LitData's optimized
chunks: whole shards of up to 64 MB, their defaults) and reads them back from the
same S3 server, shuffled, through its own StreamingDataset and a PyTorch
DataLoader, into a fresh local cache (a first epoch: every shard downloaded once).

These libraries pull in a torch and a numpy of their own choosing, so they run
in a Python of their own (bench/object_store.py --peer-python), not in .venv:

    python3.11 -m venv /work/peervenv
    echo torch==2.13.0 > /tmp/c.txt
    /work/peervenv/bin/pip install -c /tmp/c.txt torch==2.13.0 mosaicml-streaming litdata boto3 numpy

Run by bench/object_store.py as `PYTHON _s3_peers.py KIND ...`; prints one line
`RESULT {json}`. KIND: write-mosaic, write-litdata (local folders from the
bench's NPZ/NPY files), mosaic, litdata (one epoch from s3://).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Tuple

import numpy as np
from _object_store_report import epoch_rusage  # the same CPU counts as bench/object_store.py's readers

SHARD_BYTES = 64 << 20  # both libraries' default shard/chunk size


def import_streaming():
    """Mosaic Streaming's package, less its vision datasets (streaming.vision),
    which import torchvision: PyPI's torchvision is built for PyPI's CUDA torch
    and fails to load beside the pinned CPU torch. MDSWriter and
    StreamingDataset do not use them."""
    import types

    try:
        import torchvision  # noqa: F401
    except Exception:  # not installed, or built for another torch
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import streaming

    return streaming


def sample_refs(src: pathlib.Path) -> List[Tuple[str, int]]:
    """The bench set's samples in dlfeed's id order (files by name, rows in
    order), as (file, row): small NPZ files hold x and y, large NPY files x."""
    refs = []
    for path in sorted(src.iterdir()):
        if path.suffix == ".npz":
            with np.load(path) as z:
                refs += [(str(path), r) for r in range(len(z["y"]))]
        elif path.suffix == ".npy":
            refs.append((str(path), 0))
    return refs


@functools.lru_cache(maxsize=2)
def _arrays(path: str) -> Dict[str, np.ndarray]:
    if path.endswith(".npz"):
        with np.load(path) as z:
            return {"x": z["x"], "y": z["y"]}
    return {"x": np.load(path)}


def sample(ref: Tuple[str, int]) -> Dict[str, np.ndarray]:
    """One sample: {x, y} (y as a 1-element array) from an NPZ row, {x} from an NPY file."""
    path, r = ref
    return {k: v[r:r + 1] if k == "y" else v[r] for k, v in _arrays(path).items()}


def samples_of(src: pathlib.Path) -> Iterator[Dict[str, np.ndarray]]:
    for ref in sample_refs(src):
        yield sample(ref)


def columns(sample: Dict[str, np.ndarray]) -> Dict[str, str]:
    """MDS column encodings for a sample's arrays (shape and dtype fixed per column)."""
    return {k: f"ndarray:{v.dtype.name}:{','.join(map(str, v.shape))}" for k, v in sample.items()}


def write_mosaic(src: pathlib.Path, out: pathlib.Path) -> dict:
    MDSWriter = import_streaming().MDSWriter

    shutil.rmtree(out, ignore_errors=True)
    it = samples_of(src)
    first = next(it)
    n = 0
    with MDSWriter(out=str(out), columns=columns(first), size_limit=SHARD_BYTES) as w:
        for s in (first, *it):
            w.write(s)
            n += 1
    return {"samples": n, "files": sorted(p.name for p in out.iterdir())}


def write_litdata(src: pathlib.Path, out: pathlib.Path) -> dict:
    import litdata

    shutil.rmtree(out, ignore_errors=True)
    refs = sample_refs(src)
    litdata.optimize(fn=sample, inputs=refs, output_dir=str(out), chunk_bytes=SHARD_BYTES, num_workers=1,
                     mode="overwrite")
    return {"samples": len(refs), "files": sorted(p.name for p in out.iterdir())}


def _consume(loader) -> Tuple[int, int]:
    """Samples and bytes of the batches a DataLoader gives."""
    samples = nbytes = 0
    for batch in loader:
        arrays = [batch[k] for k in sorted(batch) if k != "__index__"]
        samples += len(arrays[0])
        nbytes += sum(int(v.numel() * v.element_size()) for v in arrays)
    return samples, nbytes


def read_mosaic(a) -> dict:
    import torch

    streaming = import_streaming()
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()  # an earlier run's, which Streaming's own docs say to clear

    local = tempfile.mkdtemp(prefix="mosaic-cache-", dir=a.cache_root)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        ds = streaming.StreamingDataset(remote=a.url, local=local, shuffle=True, shuffle_seed=a.seed,
                                        batch_size=a.batch)
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers)
        samples, nbytes = _consume(loader)
        t1 = time.perf_counter()
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return {"samples": samples, "bytes": nbytes, "seconds": t1 - t0, "workers": a.workers,
            **epoch_rusage(ru0, resource.getrusage(resource.RUSAGE_SELF))}


def read_litdata(a) -> dict:
    import litdata
    from litdata.streaming import downloader

    # LitData reads s3:// through obstore, whose client refuses http:// endpoints
    # unless told (the bench's server is plain HTTP on 127.0.0.1; real stores are HTTPS).
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
    cache = tempfile.mkdtemp(prefix="litdata-cache-", dir=a.cache_root)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        ds = litdata.StreamingDataset(a.url, cache_dir=cache, shuffle=True, seed=a.seed,
                                      storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
        loader = litdata.StreamingDataLoader(ds, batch_size=a.batch, num_workers=a.workers)
        samples, nbytes = _consume(loader)
        t1 = time.perf_counter()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"samples": samples, "bytes": nbytes, "seconds": t1 - t0, "workers": a.workers,
            **epoch_rusage(ru0, resource.getrusage(resource.RUSAGE_SELF))}


def main(argv: List[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("write-mosaic", "write-litdata", "mosaic", "litdata"))
    ap.add_argument("--src", help="write-*: the bench set's folder")
    ap.add_argument("--out", help="write-*: the folder to write")
    ap.add_argument("--url", help="mosaic, litdata: s3://bucket/prefix")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-root", default=None, help="where the local shard caches go (default: the temp folder)")
    a = ap.parse_args(argv)
    if a.kind == "write-mosaic":
        out = write_mosaic(pathlib.Path(a.src), pathlib.Path(a.out))
    elif a.kind == "write-litdata":
        out = write_litdata(pathlib.Path(a.src), pathlib.Path(a.out))
    elif a.kind == "mosaic":
        out = read_mosaic(a)
    else:
        out = read_litdata(a)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
