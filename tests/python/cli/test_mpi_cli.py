# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np 4 dlfeed run` (docs/distributed.md): the job's summary on rank 0
is checked here against an independent reduction of the four per-rank JSON
files (sums, means, extremes, and percentiles recomputed from the merged
histograms); traces carry the rank as pid; the data read by the job equals a
one-process run's; staging leaves byte-exact copies and later epochs read them.
Skipped where mpirun is missing or dlfeed was built without MPI."""
import filecmp
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

NP = 4


@pytest.fixture(scope="module")
def mpirun():
    exe = shutil.which("mpirun")
    if exe is None:
        pytest.skip("mpirun not found (Debian: openmpi-bin)")
    flags = []
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        flags.append("--oversubscribe")
        if os.geteuid() == 0:
            flags.append("--allow-run-as-root")
    return [exe, *flags]


@pytest.fixture(scope="module")
def data(tmp_path_factory, dlfeed):
    d = tmp_path_factory.mktemp("mpi") / "d"
    dlfeed.run("generate", "--format", "npz", "--layout", "dlio", "--dir", d, "--files", 8,
               "--samples-per-file", 16, "--shape", "32,32")
    return d / "train"


def mpi_run(mpirun, dlfeed, *args, np=NP):
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    proc = subprocess.run([*mpirun, "-np", str(np), dlfeed.binary, "run", "--mpi=on", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)
    if "built without MPI" in proc.stderr:
        pytest.skip("this dlfeed was built without MPI")
    assert proc.returncode == 0, f"mpirun exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def checksum(stdout):
    m = re.search(r"checksum: ([0-9a-f]{16}) over (\d+) samples", stdout)
    assert m, stdout
    return m.group(1), int(m.group(2))


# The histogram buckets of counters.h: exact below 8, then 8 per power of two.
def bucket_of(v):
    if v < 8:
        return v
    k = v.bit_length() - 1
    return (k - 2) * 8 + ((v >> (k - 3)) & 7)


def bucket_low(b):
    if b < 8:
        return b
    k = b // 8 + 2
    return (8 + b % 8) << (k - 3)


def percentile(hist, p, mx):
    """p-quantile as docs/counters.md defines it: the bucket midpoint, at most max."""
    total = sum(c for _, c in hist)
    rank = max(1, math.ceil(p * total))
    seen = 0
    for low, c in hist:
        seen += c
        if seen >= rank:
            b = bucket_of(low)
            if b < 8:
                return float(b)
            return min((bucket_low(b) + bucket_low(b + 1)) / 2, float(mx))
    return float(mx)


def merged_hist(dists):
    acc = {}
    for d in dists:
        for low, c in d["hist"]:
            acc[low] = acc.get(low, 0) + c
    return [[low, acc[low]] for low in sorted(acc)]


def check_dist(job, ranks, what):
    assert job["count"] == sum(r["count"] for r in ranks), what
    total = "sum" if "sum" in job else "value"  # per-epoch latency vs top-level counters
    assert job[total] == sum(r[total] for r in ranks), what
    if job["count"] == 0:
        return
    assert job["max"] == max(r["max"] for r in ranks), what
    hist = merged_hist(ranks)
    assert job["hist"] == hist, what
    for p, key in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        assert job[key] == pytest.approx(percentile(hist, p, job["max"]), rel=1e-8), f"{what} {key}"


def test_job_summary_is_the_reduction_of_the_rank_summaries(mpirun, dlfeed, data, tmp_path):
    s, t = tmp_path / "s.json", tmp_path / "t.json"
    out = mpi_run(mpirun, dlfeed, "--fields", "x", "--strategy", "global_shuffle", "--epochs", 2, "--batch-size", 4,
                  "--compute-ms", 1, "--checksum", "--summary-json", s, "--trace", t, data)
    assert out.count("dataset:") == 1, "only rank 0 prints"
    assert "rank 0/4 reads 32 samples" in out
    job = json.loads(s.read_text())
    ranks = [json.loads((tmp_path / f"s.rank{r}.json").read_text()) for r in range(NP)]
    assert job["ranks"] == NP and [r["ranks"] for r in ranks] == [1] * NP
    assert [p["rank"] for p in job["per_rank"]] == list(range(NP))
    for r in range(NP):
        assert job["per_rank"][r]["total"]["samples"] == ranks[r]["total"]["samples"] == 64
    assert len(job["epochs"]) == 2
    for e, je in enumerate(job["epochs"] + [job["total"]]):
        re_ = [r["epochs"][e] if e < 2 else r["total"] for r in ranks]
        for k in ("samples", "batches", "bytes_read", "bytes_delivered", "planned_reads", "io_operations", "extents"):
            assert je[k] == sum(x[k] for x in re_), (e, k)
        for k in ("samples_per_s", "read_mib_per_s", "delivered_mib_per_s"):
            assert je[k] == pytest.approx(sum(x[k] for x in re_), rel=1e-6), (e, k)
        for k in ("stall_s", "compute_s", "io_busy_s", "first_step_s"):
            assert je[k] == pytest.approx(sum(x[k] for x in re_) / NP, rel=1e-6, abs=1e-9), (e, k)
        aus = [x["au_percent"] for x in re_]
        assert je["au_percent"] == pytest.approx(sum(aus) / NP, rel=1e-6, abs=1e-9), e
        assert je["au_min_percent"] == pytest.approx(min(aus), rel=1e-8) and \
            je["au_max_percent"] == pytest.approx(max(aus), rel=1e-8), e
        assert je["wall_s"] == pytest.approx(max(x["wall_s"] for x in re_), rel=1e-8), e
        assert je["wall_min_s"] == pytest.approx(min(x["wall_s"] for x in re_), rel=1e-8), e
        assert je["steps"] == max(x["steps"] for x in re_)
        for name, d in je["latency"].items():
            check_dist(d, [x["latency"][name] for x in re_], f"epoch {e} {name}")
    for name, c in job["counters"].items():
        assert c["value"] == sum(r["counters"][name]["value"] for r in ranks), name
        if c["kind"] == "distribution":
            check_dist(c, [r["counters"][name] for r in ranks], name)
    # A barrier per step on every rank: 8 batches per epoch, 2 epochs.
    assert job["counters"]["barrier_ns"]["count"] == NP * 2 * 8
    assert job["counters"]["samples"]["value"] == 2 * 128
    # The job read what one process reads (128 samples, divisible by 4: no padding).
    one = dlfeed.run("run", "--fields", "x", "--strategy", "global_shuffle", "--epochs", 2, "--checksum",
                     data).stdout
    assert checksum(out) == checksum(one)
    # One trace per rank, pid = rank, named for Perfetto.
    for r in range(NP):
        tr = json.loads((tmp_path / f"t.rank{r}.json").read_text())
        events = tr["traceEvents"]
        assert {ev["pid"] for ev in events} == {r}
        names = [ev for ev in events if ev["name"] == "process_name"]
        assert names and names[0]["args"]["name"] == f"dlfeed rank {r}"
        assert any(ev["name"] == "barrier" for ev in events)
    assert not (tmp_path / "t.json").exists()
    # Merged into one view: every rank's events, shifted onto the earliest time base.
    merged_path = tmp_path / "job.json"
    traces = [tmp_path / f"t.rank{r}.json" for r in range(NP)]
    subprocess.run([sys.executable, str(ROOT / "tools" / "dlfeed_trace_merge.py"), "--out", str(merged_path),
                    *map(str, traces)], check=True, capture_output=True)
    merged = json.loads(merged_path.read_text())["traceEvents"]
    assert {ev["pid"] for ev in merged} == set(range(NP))
    bases = [json.loads(p.read_text())["otherData"]["dlfeed_trace"]["time_base_unix_us"] for p in traces]
    for r, p in enumerate(traces):
        mine = [ev for ev in json.loads(p.read_text())["traceEvents"] if ev["ph"] == "X"]
        theirs = [ev for ev in merged if ev["pid"] == r and ev["ph"] == "X"]
        assert len(mine) == len(theirs) > 0
        for a, b in zip(mine, theirs):
            assert b["ts"] == pytest.approx(a["ts"] + (bases[r] - min(bases)), abs=1e-3)


def test_plain_run_is_one_process_with_one_summary(dlfeed, data, tmp_path):
    s = tmp_path / "s.json"
    out = dlfeed.run("run", "--fields", "x", "--summary-json", s, data).stdout
    assert "rank 0/1 reads 128 samples" in out
    assert json.loads(s.read_text())["ranks"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


@pytest.mark.parametrize("strategy", ["global_shuffle", "local_shuffle"])
def test_staging_copies_are_exact_and_later_epochs_read_them(mpirun, dlfeed, data, tmp_path, strategy):
    stage = tmp_path / "stage"
    s = tmp_path / "s.json"
    out = mpi_run(mpirun, dlfeed, "--fields", "x", "--strategy", strategy, "--epochs", 3, "--batch-size", 4,
                  "--checksum", "--stage-to", stage, "--stage-wait", "--summary-json", s, data)
    assert "stage: waited" in out
    assert re.search(r"staging, epoch 1: read [0-9.]+ MiB from staged copies \(100%\)", out), out
    job = json.loads(s.read_text())
    e0, e1, e2 = job["epochs"]
    assert e1["bytes_read_staged"] == e1["bytes_read"] > 0
    assert e2["bytes_read_staged"] == e2["bytes_read"]
    assert sum(e["bytes_staged"] for e in job["epochs"]) <= job["counters"]["stage_copied_bytes"]["value"]
    if strategy == "local_shuffle":
        assert e0["bytes_read_staged"] == 0  # a rank looks for its own copies only, none made yet
    files = sorted(data.glob("*.npz"))
    copies = sorted(p for p in stage.iterdir() if not p.name.startswith("."))
    assert len(copies) == len(files), "every file staged by its owner, no temporaries left"
    for f in files:
        match = [c for c in copies if c.name.endswith(f"-{f.stat().st_size}-{f.name}")]
        assert len(match) == 1, f.name
        assert filecmp.cmp(f, match[0], shallow=False), f.name
    # The same samples as without staging.
    plain = mpi_run(mpirun, dlfeed, "--fields", "x", "--strategy", strategy, "--epochs", 3, "--batch-size", 4,
                    "--checksum", data)
    assert checksum(out) == checksum(plain)


@pytest.mark.parametrize("common,rank1", [
    (["--epochs", "2"], ["--batch-size", "9"]),
    (["--epochs", "2"], ["--cache", "64M"]),
    (["--epochs", "2", "--fields", "x,y"], ["--fields", "x"]),
    (["--epochs", "2"], ["--epochs", "3"]),
    (["--epochs", "2", "--cache", "64M"], ["--source-throttle", "100M:1ms"]),
])
def test_ranks_given_other_settings_are_an_error_on_every_rank_not_a_hang(mpirun, dlfeed, data, common, rank1):
    """A rank started with other flags (a batch size, the job cache, fields, epochs, a throttle) waited for
    its peers in collectives they never made (each case hung until killed). The ranks compare their
    settings first: an error on every rank naming the setting and the two values."""
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    base = [dlfeed.binary, "run", "--mpi=on", "--batch-size", "4", *common]
    try:
        proc = subprocess.run([*mpirun, "-np", "1", *base, data, ":", "-np", "2", *base, *rank1, data],
                              capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job hung with {rank1} on ranks 1 and 2 only")
    if "built without MPI" in proc.stderr:
        pytest.skip("this dlfeed was built without MPI")
    assert proc.returncode != 0
    name = rank1[0]
    for r in range(3):
        assert f"error on rank {r}: {name}" in proc.stderr and "on rank 0 but" in proc.stderr, proc.stderr[-3000:]
    assert "every rank of a job runs with the same settings" in proc.stderr


def test_ranks_given_another_order_parameter_are_an_error_on_every_rank(mpirun, dlfeed, data):
    """A rank given another --block-size ran, and the job read samples twice or never in an epoch (its
    checksum was not one process's): the ranks compare every parameter their strategy reads."""
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    base = [dlfeed.binary, "run", "--mpi=on", "--batch-size", "4", "--strategy", "block_shuffle"]
    proc = subprocess.run([*mpirun, "-np", "1", *base, "--block-size", "64", data, ":", "-np", "2", *base,
                           "--block-size", "8", data], capture_output=True, text=True, timeout=120, env=env)
    if "built without MPI" in proc.stderr:
        pytest.skip("this dlfeed was built without MPI")
    assert proc.returncode != 0
    for r in range(3):
        assert f"error on rank {r}: the order is 'strategy block_shuffle seed 42 drop_last 0 block_size 64 window " \
               "16' on rank 0 but 'strategy block_shuffle seed 42 drop_last 0 block_size 8 window 16' on rank 1" \
               in proc.stderr, proc.stderr[-3000:]


def test_settings_that_mean_the_same_are_the_same(mpirun, dlfeed, data):
    """--cache 64M on one rank and 65536K on the others is one cache size: the job runs."""
    env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    base = [dlfeed.binary, "run", "--mpi=on", "--batch-size", "4", "--cache-ranks-per-node", "1"]
    proc = subprocess.run([*mpirun, "-np", "1", *base, "--cache", "64M", data, ":", "-np", "1", *base, "--cache",
                           "65536K", data], capture_output=True, text=True, timeout=120, env=env)
    if "built without MPI" in proc.stderr:
        pytest.skip("this dlfeed was built without MPI")
    assert proc.returncode == 0, proc.stderr[-3000:]
