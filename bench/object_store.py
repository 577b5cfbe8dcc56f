#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""s3:// datasets against the S3 server's own limit for the same bytes, on a
SeaweedFS started here (`weed mini` on 127.0.0.1 with free ports and one SigV4
identity: tests/python/s3_harness.py's S3Server, imported) and given two
datasets written by numpy:

- small: NPZ files of 64 samples each, x (64, 224, 224, 3) uint8 (147 KiB a
  sample) and y (64,) int64;
- large: NPY files of one (1, 2048, 2048) float32 sample each (16 MiB).

One epoch per process (--epochs N: N for dlfeed and s3torchconnector, whose
rate is then over all N, the loader's creation included; the fault runs keep
one), global shuffle, in rounds whose running order rotates;
MB/s (10^6 bytes) of sample bytes delivered, medians over --repeats:

- limit, boto3: a ThreadPoolExecutor of --threads threads, one boto3 client
  each, doing a ranged GET of exactly each sample's extent (x; y, 8 bytes per
  sample, comes with one GET of each file's y array), in a shuffled order;
- limit, libcurl: the same GETs from bench/s3_ranged_get.c (one thread,
  libcurl multi, --threads transfers on kept-alive connections, SigV4 as
  dlfeed::s3 signs), compiled here with gcc;
  "curl 2MiB pieces" (large samples) the same bytes in the 2 MiB GETs
  dlfeed::s3 makes of a large sample; the server's limit is the fastest of
  these; "curl objects" gets whole objects instead (not the same bytes:
  shown for s3torchconnector, which reads whole objects);
- dlfeed: `dlfeed.Loader("s3://bench/<set>", strategy="global_shuffle")`, the
  time from creating the loader (listing, headers) to the epoch's end: by
  default a set within half the memory budget is held in memory, each object
  read whole once, from create on, in the order the first epoch uses them
  ("dlfeed"); "dlfeed ranged" (`resident="off"`)
  reads each batch's extents as ranged GETs, with DLFEED_S3_CONNECTIONS unset
  (16 a loader engine) and, "dlfeed cN", set to each of --connections;
- s3torchconnector (when importable): S3MapDataset over the same objects,
  whole objects (that is how it reads), parsed with numpy, in PyTorch's
  DataLoader with 0 and --s3tc-workers workers;
- Mosaic Streaming and LitData (with --peer-python, a Python that has them;
  bench/_s3_peers.py says how to make one): the same samples written in each
  one's own format (MDS shards, optimized chunks; 64 MB each, their default),
  uploaded beside the sets and read by its StreamingDataset into a fresh local
  cache, shuffled, in PyTorch's DataLoader with 0 and --s3tc-workers workers;
- faults: dlfeed through the harness's S3Proxy (a Python relay) with none and
  with --slowdown of the GETs answered 503 SlowDown; the ids and a checksum of
  every sample's bytes are compared with the files written here, and the
  process's s3 counters (retries, failures) are kept.

Each run also notes the CPU seconds of the client and of the server (`weed`):
the two share the machine's cores. On a shared machine the script waits
before each run (--quiet-wait seconds in all) while someone else's build
(cc1plus, ninja, ld, ...) runs, and leaves runs a build ran beside out of
the medians.

s3torchconnector is not in requirements-test.txt; to measure it:
`.venv/bin/pip install s3torchconnector==1.5.0` (a pure-Python sdist and
the s3torchconnectorclient wheel; it keeps the torch installed).

Writes --out/object_store.json (every run) and --out/README.md (machine,
command, the table); prints the table.

    .venv/bin/python bench/object_store.py                 # about 4 minutes on 2 cores
    .venv/bin/python bench/object_store.py --repeats 5     # about 6
    .venv/bin/python bench/object_store.py --repeats 1 --small-files 4 --large-files 6
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import io
import json
import os
import pathlib
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402
from _object_store_report import (  # noqa: E402
    LARGE_SHAPE,
    PEERS,
    PER_FILE,
    PIECES,
    SMALL_SHAPE,
    cache_runs,
    epoch_rusage,
    readme,
    summarize,
)

BUCKET = "bench"
# The S3 test harness (S3Server, S3Proxy): where it is now, where it was.
HARNESS = (bl.ROOT / "tests" / "python" / "s3_harness.py", bl.ROOT / "tests" / "python" / "s3" / "conftest.py")
CURL_SRC = bl.ROOT / "bench" / "s3_ranged_get.c"
PIECE = 2 << 20  # dlfeed::s3 reads a large sample in pieces of this size
PEERS_PY = bl.ROOT / "bench" / "_s3_peers.py"


# ---------------------------------------------------------------- datasets

def npy_data(f, at: int):
    """(offset of the array's data, shape, dtype) of the .npy that starts at byte AT of F."""
    f.seek(at)
    major, _ = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    assert not fortran
    return f.tell(), shape, dtype


def npz_members(path: pathlib.Path) -> Dict[str, tuple]:
    """{member name without .npy: (data offset, shape, dtype)} of a stored (not deflated) NPZ."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED, f"{path}: {info.filename} is compressed"
            f.seek(info.header_offset)
            local = f.read(30)
            name_len, extra_len = struct.unpack_from("<HH", local, 26)
            out[info.filename[:-4]] = npy_data(f, info.header_offset + 30 + name_len + extra_len)
    return out


def write_sets(data: pathlib.Path, small_files: int, large_files: int, seed: int) -> Dict[str, dict]:
    """Writes the two datasets under DATA once (a stamp says with what) and returns, for each,
    its files, the GETs of its sample extents and the expected digest of an epoch."""
    want = json.dumps({"small": small_files, "large": large_files, "seed": seed, "per_file": PER_FILE,
                       "small_shape": SMALL_SHAPE, "large_shape": LARGE_SHAPE})
    stamp = data / "sets.json"
    if stamp.exists():
        got = json.loads(stamp.read_text())
        if got.get("want") == want:
            return got["sets"]
    for name in ("small", "large"):
        shutil.rmtree(data / name, ignore_errors=True)
        (data / name).mkdir(parents=True)
    rng = np.random.default_rng(seed)
    sets: Dict[str, dict] = {}
    # small: ids file-major, as dlfeed numbers them (files in key order, rows in order).
    files, gets, digest = [], [], []
    for i in range(small_files):
        path = data / "small" / f"part_{i:04d}.npz"
        x = rng.integers(0, 256, size=(PER_FILE, *SMALL_SHAPE), dtype=np.uint8)
        y = np.arange(i * PER_FILE, (i + 1) * PER_FILE, dtype=np.int64)
        np.savez(path, x=x, y=y)
        m = npz_members(path)
        (x_at, _, _), (y_at, _, _) = m["x"], m["y"]
        row = int(np.prod(SMALL_SHAPE))
        files.append(path.name)
        gets.append([path.name, y_at, y.nbytes])
        for r in range(PER_FILE):
            gets.append([path.name, x_at + r * row, row])
            digest.append((i * PER_FILE + r, zlib.crc32(x[r].tobytes()) ^ zlib.crc32(y[r].tobytes())))
    sets["small"] = {"files": files, "gets": gets, "samples": small_files * PER_FILE,
                     "sample_bytes": small_files * PER_FILE * (int(np.prod(SMALL_SHAPE)) + 8),
                     "digest": epoch_digest(digest), "batch": 64, "fields": ["x", "y"]}
    files, gets, digest = [], [], []
    for i in range(large_files):
        path = data / "large" / f"sample_{i:04d}.npy"
        x = rng.random(LARGE_SHAPE, dtype=np.float32)
        np.save(path, x)
        with open(path, "rb") as f:
            at, _, _ = npy_data(f, 0)
        files.append(path.name)
        gets.append([path.name, at, x.nbytes])
        digest.append((i, zlib.crc32(x.tobytes())))
    sets["large"] = {"files": files, "gets": gets, "samples": large_files,
                     "sample_bytes": large_files * int(np.prod(LARGE_SHAPE)) * 4,
                     "digest": epoch_digest(digest), "batch": 4, "fields": None}
    stamp.write_text(json.dumps({"want": want, "sets": sets}))
    return sets


def epoch_digest(pairs) -> str:
    """One hash of (sample id, checksum of its bytes) over an epoch, in id order."""
    h = hashlib.sha256()
    for sid, crc in sorted(pairs):
        h.update(struct.pack("<QI", sid, crc))
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- workers (child processes)

def worker_dlfeed(a) -> dict:
    import dlfeed

    kw = {"fields": a.fields.split(",")} if a.fields else {}
    kw["resident"] = a.resident
    if a.cache_dir:
        kw.update(cache_dir=a.cache_dir, cache_limit=a.cache_limit)
    before = dlfeed._dlfeed.s3_stats()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    loader = dlfeed.Loader(a.url, batch_size=a.batch, strategy="global_shuffle", seed=a.seed, **kw)
    t_open = time.perf_counter()
    samples, nbytes, t_first, pairs = 0, 0, None, []
    per_epoch: List[dict] = []  # with --record-order: each epoch's sample ids and the s3 counters' change
    for _ in range(a.epochs):
        e0, order = dlfeed._dlfeed.s3_stats(), []
        for b in loader:
            if t_first is None:
                t_first = time.perf_counter()
            arrays = b.arrays()
            samples += len(b)
            nbytes += sum(v.nbytes for v in arrays.values())
            if a.record_order:
                order += b.sample_ids.tolist()
            if a.checksum:
                vals = list(arrays.values())
                for k, sid in enumerate(b.sample_ids.tolist()):
                    crc = 0
                    for v in vals:
                        crc ^= zlib.crc32(np.ascontiguousarray(v[k]).tobytes())
                    pairs.append((sid, crc))
        if a.record_order:
            e1 = dlfeed._dlfeed.s3_stats()
            per_epoch.append({"order": order, "s3": {k: e1[k] - e0[k] for k in e1}})
    t_end = time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    loader.close()
    after = dlfeed._dlfeed.s3_stats()
    out = {"samples": samples, "bytes": nbytes, "seconds": t_end - t0, "open_s": t_open - t0,
           "first_batch_s": (t_first or t_end) - t0, **epoch_rusage(ru0, ru1),
           "s3": {k: after[k] - before[k] for k in after},
           "connections": os.environ.get("DLFEED_S3_CONNECTIONS", "default"),
           "module": dlfeed._dlfeed.__file__}
    if a.checksum:
        ids = [p[0] for p in pairs]
        out.update(distinct_ids=len(set(ids)), digest=epoch_digest(pairs))
    if a.record_order:
        out["per_epoch"] = per_epoch
    return out


def worker_boto3(a) -> dict:
    import boto3
    from botocore.config import Config

    plan = json.loads(pathlib.Path(a.plan).read_text())
    session = boto3.session.Session()
    clients = [session.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                              region_name=os.environ["AWS_REGION"],
                              config=Config(s3={"addressing_style": "path"}, max_pool_connections=2))
               for _ in range(a.threads)]
    local = threading.local()
    lock = threading.Lock()

    def init():
        with lock:
            local.client = clients.pop()

    def get(g):
        key, off, n = g
        body = local.client.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={off}-{off + n - 1}")["Body"].read()
        if len(body) != n:
            raise RuntimeError(f"{key} {off}+{n}: {len(body)} bytes")
        return n

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.threads, initializer=init) as ex:
        nbytes = sum(ex.map(get, plan))
    t1 = time.perf_counter()
    return {"requests": len(plan), "bytes": nbytes, "seconds": t1 - t0, "threads": a.threads,
            **epoch_rusage(ru0, resource.getrusage(resource.RUSAGE_SELF))}


def worker_s3tc(a) -> dict:
    import torch
    from s3torchconnector import S3ClientConfig, S3MapDataset

    def parse(reader):
        data = reader.read()
        if reader.key.endswith(".npz"):
            with np.load(io.BytesIO(data)) as z:
                arrays = [z[k] for k in z.files]
        else:
            arrays = [np.load(io.BytesIO(data))]
        if a.workers:
            return [torch.from_numpy(x) for x in arrays]  # to the main process through shared memory
        return arrays

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    ds = S3MapDataset.from_prefix(a.url + "/", region=os.environ["AWS_REGION"],
                                  endpoint=os.environ["AWS_ENDPOINT_URL"], transform=parse,
                                  s3client_config=S3ClientConfig(force_path_style=True))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=True, num_workers=a.workers,
                                         generator=torch.Generator().manual_seed(a.seed))
    nbytes = objects = 0
    for _ in range(a.epochs):
        for arrays in loader:
            objects += 1
            nbytes += sum(int(x.nbytes) for x in arrays)
    t1 = time.perf_counter()
    return {"objects": objects, "bytes": nbytes, "seconds": t1 - t0, "workers": a.workers,
            **epoch_rusage(ru0, resource.getrusage(resource.RUSAGE_SELF))}


def worker_main(argv: List[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("dlfeed", "boto3", "s3tc"))
    ap.add_argument("--url")
    ap.add_argument("--plan")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--fields", default="")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checksum", action="store_true")
    ap.add_argument("--resident", default="auto")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--cache-limit", type=int, default=0)
    ap.add_argument("--record-order", action="store_true")
    a = ap.parse_args(argv)
    out = {"dlfeed": worker_dlfeed, "boto3": worker_boto3, "s3tc": worker_s3tc}[a.kind](a)
    print("RESULT " + json.dumps(out))


# ---------------------------------------------------------------- the parent

def load_harness():
    """The tests' S3 harness as a module (S3Server, S3Proxy); it needs pytest and boto3."""
    path = next((p for p in HARNESS if p.exists()), None)
    if path is None:
        sys.exit(f"the S3 test harness is not in {' or '.join(map(str, HARNESS))}")
    spec = importlib.util.spec_from_file_location("dlfeed_s3_harness", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def upload(server, root: pathlib.Path, prefix: str, names: List[str], threads: int = 8) -> None:
    server.ensure_bucket(BUCKET)
    clients = [server.client() for _ in range(threads)]  # made here: the session is not thread-safe

    def put(i: int) -> None:
        for name in names[i::threads]:
            with open(root / name, "rb") as f:
                clients[i].put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=f)

    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(put, range(threads)))


def child(args: List, env: dict, timeout: float = 600, python: Optional[List[str]] = None) -> dict:
    """Runs a worker (this script's --worker, or PYTHON SCRIPT for the peers) and returns its RESULT."""
    head = python or [sys.executable, __file__, "--worker"]
    proc = subprocess.run([*head, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"worker {args[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def peer_env(env: dict) -> dict:
    """The server's AWS_* as the peers also read them: Streaming's S3_ENDPOINT_URL."""
    return {**env, "S3_ENDPOINT_URL": env["AWS_ENDPOINT_URL"]}


def write_peer_sets(python: str, data: pathlib.Path, names: List[str], server, env: dict) -> List[str]:
    """Each set in Mosaic Streaming's and LitData's formats, written by them and uploaded as
    KIND-SET/ beside the set; returns the peers written."""
    for kind in PEERS:
        for name in names:
            folder = data / f"{kind}-{name}"
            r = child([f"write-{kind}", "--src", data / name, "--out", folder], env, python=[python, str(PEERS_PY)])
            upload(server, folder, f"{kind}-{name}", r["files"])
    return list(PEERS)


def curl_run(binary: pathlib.Path, plan_txt: pathlib.Path, parallel: int, env: dict) -> dict:
    proc = subprocess.run([str(binary), "--parallel", str(parallel), str(plan_txt)], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"s3_ranged_get failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


# Processes that mean someone else is building on the machine (a shared VM).
BUSY_NAMES = {"cc1plus", "cc1", "ninja", "make", "ld", "ld.lld", "lld", "as", "clang", "clang++", "rustc"}


def busy_now() -> List[str]:
    """The names of the running processes in BUSY_NAMES."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            if name in BUSY_NAMES:
                out.append(name)
    return out


class BusyWatch:
    """Samples busy_now() every 0.25 s in a thread: `seen` counts the samples that found a build
    running since the last take(); wait_quiet() waits (up to a budget over the whole run) until none
    has run for `settle` seconds."""

    def __init__(self, budget_s: float, settle: float = 5.0):
        self.budget_s, self.settle, self.waited_s, self.seen = budget_s, settle, 0.0, 0
        self._last_busy = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            if busy_now():
                self.seen += 1
                self._last_busy = time.monotonic()

    def take(self) -> int:
        n, self.seen = self.seen, 0
        return n

    def wait_quiet(self) -> float:
        t0 = time.monotonic()
        while self.waited_s + (time.monotonic() - t0) < self.budget_s and (
                busy_now() or time.monotonic() - self._last_busy < self.settle):
            time.sleep(0.5)
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process PID so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compile_curl(out_dir: pathlib.Path) -> Optional[pathlib.Path]:
    binary = out_dir / "s3_ranged_get"
    try:
        bl.sh(["gcc", "-O2", "-o", binary, CURL_SRC, "-lcurl"])
        return binary
    except (RuntimeError, OSError) as e:
        print(f"libcurl yardstick not built (gcc and libcurl4-openssl-dev?): {e}", file=sys.stderr)
        return None


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/object-store-bench", help="local copies and the server's folder")
    ap.add_argument("--out", default=str(bl.ROOT / "bench" / "results" /
                                         f"object-store-{datetime.date.today().isoformat()}"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--small-files", type=int, default=16, help=f"NPZ files of {PER_FILE} samples of 147 KiB")
    ap.add_argument("--large-files", type=int, default=24, help="NPY files of one 16 MiB sample")
    ap.add_argument("--threads", type=int, default=16, help="the plain clients' GETs in flight")
    ap.add_argument("--connections", default="8,16,32", help="DLFEED_S3_CONNECTIONS values besides the default")
    ap.add_argument("--s3tc-workers", type=int, default=4, help="DataLoader workers for s3torchconnector")
    ap.add_argument("--peer-python", default=os.environ.get("DLFEED_PEER_PYTHON", ""),
                    help="a Python with mosaicml-streaming and litdata (bench/_s3_peers.py); empty: not measured")
    ap.add_argument("--slowdown", type=float, default=0.05, help="fraction of GETs the proxy answers 503")
    ap.add_argument("--sets", default="small,large")
    ap.add_argument("--epochs", type=int, default=1,
                    help="epochs per dlfeed and s3torchconnector process (the plain clients' rate is one epoch's)")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--cache-share", type=float, default=0.5,
                    help="the small set with a node-local cache of this share of its bytes, two epochs, against an "
                         "LRU cache of the same size (modelled over the same order); 0: not run")
    ap.add_argument("--quiet-wait", type=float, default=300,
                    help="seconds in all to wait, before runs, for other builds (cc1plus, ninja, ...) to end")
    ap.add_argument("--build-note", default="", help="which dlfeed build ran (for README.md; default: the checkout's "
                                                     "commit and PYTHONPATH)")
    a = ap.parse_args()

    data = pathlib.Path(a.data)
    out = pathlib.Path(a.out)
    data.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    m = bl.machine()
    if float(m["load"]) > 0.5 * (os.cpu_count() or 1):
        print(f"warning: 1-minute load {m['load']} on {os.cpu_count()} cores: the machine is busy, numbers will "
              "be noisy", file=sys.stderr)
    t_start = time.monotonic()
    sets = write_sets(data, a.small_files, a.large_files, seed=7)
    names = [s for s in a.sets.split(",") if s]
    h = load_harness()
    curl_bin = compile_curl(data)
    has_s3tc = importlib.util.find_spec("s3torchconnector") is not None
    base_env = dict(os.environ)
    base_env.setdefault("PYTHONPATH", bl.PYTHONPATH)
    base_env.pop("DLFEED_S3_CONNECTIONS", None)

    watch = BusyWatch(a.quiet_wait)
    server_dir = pathlib.Path(tempfile.mkdtemp(prefix="server-", dir=data))
    server = h.S3Server(server_dir)
    server.start()
    build = a.build_note or f"commit {bl.git_commit()}, PYTHONPATH={base_env['PYTHONPATH']}"
    results: Dict[str, dict] = {"machine": m, "commit": bl.git_commit(), "build": build, "args": vars(a),
                                "command": sys.argv,
                                "startup_s": server.startup_s, "sets": {}, "runs": []}
    try:
        t0 = time.monotonic()
        for name in names:
            upload(server, data / name, name, sets[name]["files"])
        results["upload_s"] = time.monotonic() - t0
        env = server.env(base=base_env)
        peers = write_peer_sets(a.peer_python, data, names, server, env) if a.peer_python else []
        if not a.peer_python:
            results["peers"] = "no --peer-python: Mosaic Streaming and LitData not measured"
        plans: Dict[str, Dict[str, pathlib.Path]] = {}
        for name in names:
            s = sets[name]
            gets = list(s["gets"])
            random.Random(1).shuffle(gets)
            plan = [[f"{name}/{k}", off, n] for k, off, n in gets]
            p = plans[name] = {"boto3": data / f"plan-{name}.json", "curl": data / f"plan-{name}.txt",
                               "curl objects": data / f"plan-{name}-objects.txt"}
            p["boto3"].write_text(json.dumps(plan))
            p["curl"].write_text("".join(f"{server.endpoint}/{BUCKET}/{k} {off} {n}\n" for k, off, n in plan))
            p["curl objects"].write_text("".join(
                f"{server.endpoint}/{BUCKET}/{name}/{k} 0 {(data / name / k).stat().st_size}\n" for k in s["files"]))
            if any(n > PIECE for _, _, n in plan):  # dlfeed's 2 MiB pieces of a large sample, as plain GETs
                p[PIECES] = data / f"plan-{name}-pieces.txt"
                p[PIECES].write_text("".join(f"{server.endpoint}/{BUCKET}/{k} {off + at} {min(PIECE, n - at)}\n"
                                             for k, off, n in plan for at in range(0, n, PIECE)))
            results["sets"][name] = {k: s[k] for k in ("samples", "sample_bytes", "batch", "fields", "digest")}
            results["sets"][name].update(files=len(s["files"]), gets=len(gets))

        conns = [c for c in a.connections.split(",") if c]
        if not has_s3tc:
            results["s3torchconnector"] = "not importable: pip install s3torchconnector (not measured)"

        def systems_of(name: str) -> List[str]:
            out = ["boto3"] + ([c for c in ("curl", PIECES, "curl objects") if c in plans[name]] if curl_bin else [])
            out += ["dlfeed", "dlfeed ranged"] + [f"dlfeed c{c}" for c in conns]
            out += [f"{p} w{w}" for p in peers for w in (0, a.s3tc_workers)]
            return out + (["s3tc w0", f"s3tc w{a.s3tc_workers}"] if has_s3tc else [])

        def run_one(system: str, name: str, rep: int, run_env: dict, checksum: bool = False,
                    epochs_here: int = 0) -> dict:
            epochs = epochs_here or (a.epochs if system.startswith(("dlfeed", "s3tc")) else 1)
            s = sets[name]
            url = f"s3://{BUCKET}/{name}"
            waited = watch.wait_quiet()
            watch.take()
            ru0, srv0 = resource.getrusage(resource.RUSAGE_CHILDREN), proc_cpu_s(server.proc.pid)
            if system == "boto3":
                r = child(["boto3", "--plan", plans[name]["boto3"], "--threads", a.threads], run_env)
            elif system.startswith("curl"):
                r = curl_run(curl_bin, plans[name][system], a.threads, run_env)
            elif system.startswith("s3tc"):
                r = child(["s3tc", "--url", url, "--workers", system.split("w")[1], "--seed", rep,
                           "--epochs", epochs], run_env)
            elif system.split()[0] in PEERS:
                kind, workers = system.split()
                try:
                    r = child([kind, "--url", f"s3://{BUCKET}/{kind}-{name}", "--workers", workers[1:], "--seed",
                               rep, "--batch", s["batch"], "--cache-root", data], peer_env(run_env),
                              python=[a.peer_python, str(PEERS_PY)])
                except RuntimeError as e:  # theirs to fail: kept as a failed run, left out of the medians
                    r = {"failed": str(e)[-2000:], "seconds": float("inf")}
            else:
                e = dict(run_env)
                if " c" in system:
                    e["DLFEED_S3_CONNECTIONS"] = system.split(" c")[1]
                r = child(["dlfeed", "--url", url, "--batch", s["batch"], "--fields", ",".join(s["fields"] or []),
                           "--seed", rep, "--epochs", epochs, "--resident", "auto" if system == "dlfeed" else "off",
                           *(["--checksum"] if checksum else [])], e)
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            r["client_cpu_s"] = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
            r["server_cpu_s"] = proc_cpu_s(server.proc.pid) - srv0
            r["mb_s"] = s["sample_bytes"] * epochs / r["seconds"] / 1e6
            r["epochs"] = epochs
            r["disturbed"] = watch.take()  # quarter-seconds in which a build ran beside it
            r["waited_s"] = waited
            return r

        for rep in range(a.repeats):
            for name in names:
                for system in bl.rotated(systems_of(name), rep):
                    r = run_one(system, name, rep, env)
                    r.update(system=system, set=name, repeat=rep)
                    results["runs"].append(r)
                    print(f"[{time.monotonic() - t_start:6.1f} s] {name:5s} {system:16s} {r['mb_s']:8.1f} MB/s  "
                          f"CPU s: client {r['client_cpu_s']:.1f} server {r['server_cpu_s']:.1f}"
                          f"{'  (a build ran beside it)' if r['disturbed'] else ''}", flush=True)

        if not a.no_faults:
            for name in names:
                for label, frac in (("proxy", 0.0), (f"proxy {a.slowdown:g} 503", a.slowdown)):
                    for rep in range(a.repeats):
                        proxy = h.S3Proxy(server, seed=100 + rep, slowdown=frac)
                        try:
                            r = run_one("dlfeed", name, rep, proxy.env(base=base_env), checksum=True, epochs_here=1)
                            r["proxy"] = proxy.stats()
                        finally:
                            proxy.close()
                        r.update(system=f"dlfeed {label}", set=name, repeat=rep,
                                 complete=(r["samples"] == sets[name]["samples"] == r["distinct_ids"]),
                                 digest_ok=(r["digest"] == sets[name]["digest"]))
                        results["runs"].append(r)
                        print(f"[{time.monotonic() - t_start:6.1f} s] {name:5s} {r['system']:18s} "
                              f"{r['mb_s']:8.1f} MB/s  503s {r['proxy']['slowdown']}  retries "
                              f"{r['s3']['retries']}  every sample once: {r['complete']}  digest: "
                              f"{r['digest_ok']}", flush=True)
        if a.cache_share > 0 and "small" in names:
            results["cache"] = cache_runs(a, sets, data, run_one_cached=lambda rep, d, limit: child(
                ["dlfeed", "--url", f"s3://{BUCKET}/small", "--batch", sets["small"]["batch"], "--fields", "x,y",
                 "--seed", rep, "--epochs", 2, "--resident", "off", "--cache-dir", d, "--cache-limit", limit,
                 "--record-order"], env))
            for c in results["cache"]:
                print(f"[{time.monotonic() - t_start:6.1f} s] small cache {a.cache_share:.0%}: epoch 2 fetched "
                      f"{c['dlfeed_epoch2_bytes'] / 1e6:.1f} MB (dlfeed), LRU models {c['lru_epoch2_bytes'] / 1e6:.1f}"
                      f" (samples) and {c['lru_pieces_epoch2_bytes'] / 1e6:.1f} MB (pieces), of "
                      f"{c['set_bytes'] / 1e6:.1f} MB", flush=True)
    finally:
        watch.close()
        server.stop()
        shutil.rmtree(server_dir, ignore_errors=True)
    results["waited_for_builds_s"] = watch.waited_s
    m["load_end"] = f"{os.getloadavg()[0]:.1f}"
    results["total_s"] = time.monotonic() - t_start
    table = summarize(results, names)
    results["summary"] = table["rows"]
    bl.dump_json(out / "object_store.json", results)
    (out / "README.md").write_text(readme(results, table["text"]))
    print(table["text"])
    print(f"\nwrote {out}/object_store.json and README.md ({results['total_s']:.0f} s)")



if __name__ == "__main__":
    main()
