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
import time

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
                           "--strategy", "global_shuffle", "--epochs", "2", "--checksum",
                           "--summary-json", tmp_path / "job.json", "s3://mpijob/ds"],
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
    # The job's JSON counts every rank's requests (it gave rank 0's alone).
    job = json.loads((tmp_path / "job.json").read_text())["object_store"]
    assert [job["gets"], job["lists"], job["heads"]] == [sum(int(line[k]) for line in lines) for k in range(3)], \
        (job, lines)
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


def test_a_rank_given_the_index_never_reads_a_newer_version(s3_server, tmp_path):
    """Ranks other than the one that lists learn each object's ETag from a HEAD at its first read: an
    object rewritten after the listing (same size, int32 -> float32) is then an error naming it on every
    rank, never the new bytes read with the old index."""
    if not getattr(dlfeed._dlfeed, "has_mpi", False):
        pytest.skip("this dlfeed was built without MPI")
    d = tmp_path / "data"
    d.mkdir()
    np.save(d / "a.npy", np.arange(64, dtype=np.int32).reshape(16, 4))
    s3_server.upload_dir(d, "mpijob", "rewritten/")
    out = tmp_path / "ranks"
    out.mkdir()
    script = (
        "import json, os, time, numpy as np, dlfeed\n"
        f"out = {str(out)!r}\n"
        "rank = os.environ['OMPI_COMM_WORLD_RANK']\n"
        "loader = dlfeed.Loader('s3://mpijob/rewritten', batch_size=2, strategy='global_shuffle', seed=3,\n"
        "                       mpi=True, resident='off')\n"
        "open(os.path.join(out, 'made' + rank), 'w').close()\n"
        "while not os.path.exists(os.path.join(out, 'go')):\n"
        "    time.sleep(0.05)\n"
        "try:\n"
        "    got = {'values': [v.tolist() for b in loader for v in np.asarray(b[0])]}\n"
        "except Exception as e:\n"
        "    got = {'error': str(e)}\n"
        "with open(os.path.join(out, 'rank' + rank + '.json'), 'w') as f:\n"
        "    json.dump(got, f)\n")
    env = {k: str(v) for k, v in s3_server.env().items()}
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    proc = subprocess.Popen([*mpirun(), sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while sum(1 for r in range(NP) if (out / f"made{r}").exists()) < NP:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks did not make their loaders"
            time.sleep(0.05)
        np.save(d / "a.npy", np.arange(64, dtype=np.float32).reshape(16, 4))  # the same size, another ETag
        s3_server.upload_dir(d, "mpijob", "rewritten/")
        (out / "go").touch()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
    for r in range(NP):
        got = json.loads((out / f"rank{r}.json").read_text())
        assert "error" in got, f"rank {r} read {got['values'][:2]}... of the new version with the old index"
        assert "s3://mpijob/rewritten/a.npy" in got["error"] and "changed since it was" in got["error"], got
