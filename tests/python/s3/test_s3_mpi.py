# SPDX-License-Identifier: Apache-2.0
"""s3:// datasets under `mpirun -np 4 dlfeed run` (a real SeaweedFS, s3_harness.py): one
rank lists and indexes the objects for the job (Job::share_index), the others ask for
each object's ETag once (a HEAD per object, not per read), and the job reads what one
process reads."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dlfeed

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")

NP = 4
FILES = 8


def mpirun():
    exe = shutil.which("mpirun")
    if exe is None:
        pytest.skip("mpirun not found (Debian: openmpi-bin)")
    flags = ["--oversubscribe"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return [exe, *flags, "-np", str(NP)]


def test_one_listing_and_one_head_per_object_for_the_job(s3_server, dlfeed, tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    rng = np.random.default_rng(5)
    for f in range(FILES):
        np.savez(d / f"part{f}.npz", x=rng.standard_normal((16, 8, 8), dtype=np.float32),
                 y=np.arange(16, dtype=np.int64))
    s3_server.upload_dir(d, "mpijob", "ds/")
    env = s3_server.env()
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    proc = subprocess.run([*mpirun(), dlfeed.binary, "run", "--mpi=on", "--all-ranks-print", "--fields", "x,y",
                           "--strategy", "global_shuffle", "--epochs", "2", "--checksum", "s3://mpijob/ds"],
                          capture_output=True, text=True, timeout=300, env={k: str(v) for k, v in env.items()})
    if "built without MPI" in proc.stderr:
        pytest.skip("this dlfeed was built without MPI")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = re.findall(r"object store: \d+ requests \((\d+) ranged GETs, (\d+) listings, (\d+) HEADs\)",
                       proc.stdout)
    assert len(lines) == NP, proc.stdout
    listed = sorted(int(lists) for _, lists, _ in lines)
    assert listed == [0] * (NP - 1) + [1], f"one rank lists for the job, once for both fields: {lines}"
    for gets, lists, heads in lines:
        assert int(heads) <= FILES, f"a HEAD per object at most, not per read: {lines}"
    sums = set(re.findall(r"checksum: ([0-9a-f]{16}) over (\d+) samples", proc.stdout))
    assert len(sums) == 1, "every rank prints the job's checksum"
    one = dlfeed.run("run", "--fields", "x,y", "--strategy", "global_shuffle", "--epochs", 2, "--checksum", d).stdout
    assert sums == set(re.findall(r"checksum: ([0-9a-f]{16}) over (\d+) samples", one)), "the files' samples"


def test_python_ranks_list_once_for_the_job(s3_server, tmp_path):
    """dlfeed.Loader(..., mpi=True) under mpirun: rank and world size from MPI, one rank lists
    and indexes the objects, and the ranks read disjoint shards covering the dataset."""
    if not getattr(dlfeed._dlfeed, "has_mpi", False):
        pytest.skip("this dlfeed was built without MPI")
    d = tmp_path / "data"
    d.mkdir()
    for f in range(FILES):
        np.savez(d / f"part{f}.npz", x=np.full((16, 4), f, np.float32), y=np.arange(16 * f, 16 * f + 16))
    s3_server.upload_dir(d, "mpijob", "py/")
    out = tmp_path / "ranks"
    out.mkdir()
    # Each rank writes its own file: mpirun forwards the ranks' stdout as it comes, and lines of two
    # ranks printed at once may run together.
    script = (
        "import json, os, numpy as np, dlfeed\n"
        "s0 = dlfeed._dlfeed.s3_stats()\n"
        "loader = dlfeed.Loader('s3://mpijob/py', fields=['x', 'y'], batch_size=4, strategy='global_shuffle',\n"
        "                       seed=3, mpi=True, resident='off')\n"
        "s1 = dlfeed._dlfeed.s3_stats()\n"
        "ys = [int(v) for b in loader for v in np.asarray(b['y'])]\n"
        f"path = os.path.join({str(out)!r}, 'rank' + os.environ['OMPI_COMM_WORLD_RANK'] + '.json')\n"
        "with open(path, 'w') as f:\n"
        "    json.dump({'lists': s1['lists'] - s0['lists'], 'ys': ys}, f)\n")
    env = {k: str(v) for k, v in s3_server.env().items()}
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    proc = subprocess.run([*mpirun(), sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(NP)]
    assert sorted(r["lists"] for r in ranks) == [0] * (NP - 1) + [1]
    seen = [y for r in ranks for y in r["ys"]]
    assert sorted(seen) == list(range(16 * FILES)) and all(len(r["ys"]) == 16 * FILES // NP for r in ranks)
