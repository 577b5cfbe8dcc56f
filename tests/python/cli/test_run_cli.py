# SPDX-License-Identifier: Apache-2.0
"""`dlfeed run`: the loader end to end from the command line. Its --checksum
is recomputed here from the files with numpy/h5py, independently of dlfeed."""
import json
import os
import re
import signal
import subprocess

import h5py
import numpy as np
import pytest

M64 = (1 << 64) - 1


def hash_bytes(b: bytes, seed: int) -> int:
    """The 64-bit hash `dlfeed run --checksum` uses (tools/dlfeed/run.cc)."""
    h = (seed ^ (len(b) * 0x9E3779B97F4A7C15)) & M64
    n = len(b) // 8 * 8
    for (v,) in np.frombuffer(b[:n], dtype="<u8").reshape(-1, 1):
        h = ((h ^ int(v)) * 0xBF58476D1CE4E5B9) & M64
        h ^= h >> 29
    tail = int.from_bytes(b[n:], "little") if n < len(b) else 0
    h = ((h ^ tail) * 0x94D049BB133111EB) & M64
    return h ^ (h >> 31)


def checksum(samples) -> int:
    """samples: iterable of (id, [field bytes...]); order-independent sum."""
    total = 0
    for sid, fields in samples:
        h = (sid * 0x9E3779B97F4A7C15) & M64
        for f, data in enumerate(fields):
            h ^= hash_bytes(data, f + 1)
        total = (total + h) & M64
    return total


def run_checksum(dlfeed, *args):
    out = dlfeed.run("run", "--checksum", *args).stdout
    m = re.search(r"checksum: ([0-9a-f]{16}) over (\d+) samples", out)
    assert m, out
    return int(m.group(1), 16), int(m.group(2)), out


@pytest.fixture(scope="module")
def hdf5_dataset(tmp_path_factory, dlfeed):
    d = tmp_path_factory.mktemp("run") / "h5"
    dlfeed.run("generate", "--format", "hdf5", "--dir", d, "--files", 4, "--samples-per-file", 25,
               "--shape", "8,8", "--dtype", "float32", "--chunk-samples", 5, "--compression", "deflate",
               "--hdf5-shuffle")
    return d


def expected_hdf5(folder):
    samples = []
    sid = 0
    for f in sorted(folder.glob("*.hdf5")):
        with h5py.File(f) as h:
            x, y = h["records"][...], h["labels"][...]
        for k in range(len(x)):
            samples.append((sid, [x[k].tobytes(), y[k].tobytes()]))
            sid += 1
    return samples


@pytest.mark.parametrize("io", ["sync", "thread_pool", "io_uring"])
@pytest.mark.parametrize("strategy", ["sequential", "block_shuffle", "global_shuffle", "global_feistel"])
def test_checksum_matches_h5py_for_every_backend_and_strategy(dlfeed, hdf5_dataset, io, strategy):
    want = checksum(expected_hdf5(hdf5_dataset))
    got, n, out = run_checksum(dlfeed, "--io", io, "--strategy", strategy, "--fields", "records,labels",
                               "--batch-size", 7, hdf5_dataset)
    assert n == 100
    assert got == want, out


def test_ranks_together_cover_the_dataset(dlfeed, hdf5_dataset):
    want = checksum(expected_hdf5(hdf5_dataset))
    total, count = 0, 0
    for rank in range(4):
        got, n, _ = run_checksum(dlfeed, "--strategy", "global_shuffle", "--rank", rank, "--world-size", 4,
                                 "--fields", "records,labels", hdf5_dataset)
        total = (total + got) & M64
        count += n
    assert count == 100 and total == want


def test_npz_dlio_layout_and_tfrecord(dlfeed, tmp_path):
    d = tmp_path / "dlio"
    dlfeed.run("generate", "--format", "npz", "--layout", "dlio", "--dir", d, "--files", 3,
               "--samples-per-file", 5, "--shape", "6,7")
    samples, sid = [], 0
    for f in sorted((d / "train").glob("*.npz")):
        with np.load(f) as z:
            x, y = z["x"], z["y"]
        for k in range(x.shape[-1]):
            samples.append((sid, [x[..., k].tobytes(), y[k].tobytes()]))
            sid += 1
    got, n, _ = run_checksum(dlfeed, "--fields", "x,y", "--strategy", "file_shuffle", d / "train")
    assert (got, n) == (checksum(samples), 15)

    t = tmp_path / "tfr"
    dlfeed.run("generate", "--format", "tfrecord", "--dir", t, "--files", 2, "--samples-per-file", 6,
               "--shape", "10")
    import tensorflow as tf  # noqa: PLC0415
    samples, sid = [], 0
    for f in sorted(t.glob("*.tfrecord")):
        for rec in tf.data.TFRecordDataset(str(f)):
            ex = tf.train.Example.FromString(rec.numpy())
            image = ex.features.feature["image"].bytes_list.value[0]
            label = np.array(ex.features.feature["label"].int64_list.value, dtype="<i8").tobytes()
            samples.append((sid, [image, label]))
            sid += 1
    got, n, _ = run_checksum(dlfeed, "--fields", "image,label", "--strategy", "global_shuffle", t)
    assert (got, n) == (checksum(samples), 12)


def test_multiple_epochs_and_emulated_compute(dlfeed, hdf5_dataset):
    out = dlfeed.run("run", "--epochs", 3, "--compute-ms", 1, "--batch-size", 10, "--strategy", "global_shuffle",
                     hdf5_dataset).stdout
    assert len(re.findall(r"^epoch \d: 10 batches, 100 samples", out, re.M)) == 3
    assert "total: 300 samples" in out


def test_ctrl_c_stops_the_run_and_still_writes_the_summary(dlfeed, hdf5_dataset, tmp_path):
    """SIGINT (Ctrl-C) during `dlfeed run`: it stops after the step it is in, prints and writes the summary of
    what ran (the stopped epoch marked not complete) and exits with 130; without it the summary says not
    interrupted."""
    summary, trace = tmp_path / "s.json", tmp_path / "t.json"
    proc = subprocess.Popen([dlfeed.binary, "run", "--epochs", "1000", "--compute-ms", "5", "--batch-size", "10",
                             "--summary-json", str(summary), "--trace", str(trace), str(hdf5_dataset)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # the first epoch's line: the run is in its epoch loop
            if line.startswith("epoch 0:"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    run = json.loads(summary.read_text())
    epochs = run["epochs"]
    assert run["run"]["interrupted"] is True
    m = re.search(r"^interrupted \(SIGINT\) in epoch (\d+) after (\d+) batches", out, re.M)
    if m:  # in an epoch: it is the last, not complete
        assert len(epochs) == int(m.group(1)) + 1 < 1000
        assert all(e["complete"] for e in epochs[:-1]) and not epochs[-1]["complete"]
        assert epochs[-1]["batches"] == int(m.group(2)) <= 10
        assert run["total"]["samples"] == 100 * (len(epochs) - 1) + 10 * int(m.group(2))
        # The trace has the stopped epoch's span too (it had none: its steps were after every epoch's end).
        events = json.loads(trace.read_text())["traceEvents"]
        spans = {e["args"]["epoch"]: e["args"]["complete"] for e in events if e["name"] == "epoch"}
        assert spans == {e["epoch"]: e["complete"] for e in epochs}, spans
    else:  # between two epochs: none more is started
        m = re.search(r"^interrupted \(SIGINT\) before epoch (\d+);", out, re.M)
        assert m, out
        assert len(epochs) == int(m.group(1)) and all(e["complete"] for e in epochs)
        assert run["total"]["samples"] == 100 * len(epochs)
    dlfeed.run("run", "--summary-json", summary, hdf5_dataset)
    assert json.loads(summary.read_text())["run"]["interrupted"] is False


def test_errors_name_the_file(dlfeed, tmp_path):
    d = tmp_path / "bad"
    dlfeed.run("generate", "--format", "npz", "--dir", d, "--files", 2, "--samples-per-file", 4)
    (d / "img_1.npz").write_bytes(b"not a zip")
    err = dlfeed.error("run", d)
    assert "img_1.npz" in err and "offset" in err
    err = dlfeed.error("run", "--prefetch", "sometimes", d / "img_0.npz")
    assert "prefetch" in err


@pytest.mark.parametrize("io", ["sync", "io_uring"])
def test_large_samples_are_read_in_pieces_byte_exact(dlfeed, tmp_path, io):
    """Samples written by h5py, 5 MiB each (contiguous): a batch of three is
    one 15 MiB run in the file: one planned read, done by default as pieces of
    --large-piece bytes (kernel workers copy them), or, without that route,
    of at most --max-read bytes, or of --split-piece bytes (a buffered read
    over --split-above)."""
    import json
    rng = np.random.default_rng(7)
    x = rng.integers(0, 255, size=(3, 5 << 20), dtype=np.uint8)
    path = tmp_path / "big.hdf5"
    with h5py.File(path, "w") as h:
        h["records"] = x
    want = checksum((k, [x[k].tobytes()]) for k in range(3))
    for split, requests in (([], 8),  # 15 MiB in pieces of 2 MiB (--large-above 1 MiB, --large-piece 2 MiB)
                            (["--large-above", 0, "--split-above", 0], 4),  # pieces of 4 MiB
                            # in pieces of 64 KiB (--split-piece-cold 0: whether the engine
                            # has yet seen its reads hit the cache does not matter)
                            (["--large-above", 0, "--split-piece-cold", 0], 240)):
        summary = tmp_path / "s.json"
        got, n, _ = run_checksum(dlfeed, "--io", io, "--fields", "records", "--strategy", "sequential",
                                 "--batch-size", 3, "--max-read", 4 << 20, "--resident", "off", "--summary-json",
                                 summary, *split, path)
        assert (got, n) == (want, 3)
        e = json.loads(summary.read_text())["epochs"][0]
        assert e["bytes_read"] == x.nbytes
        assert (e["planned_reads"], e["io_operations"]) == (1, requests), split


@pytest.mark.parametrize("cores,memory_mb,want", [
    ("2", None, "depth:8,budget:268435456"),  # a small machine: as before
    ("16", None, "depth:16,budget:536870912"),  # 16 cores x 32 MiB
    ("64", 1024, "depth:32,budget:536870912"),  # 32 x 32 MiB, but half a 1 GiB memory budget
    ("64", 4096, "depth:32,budget:1073741824"),  # a larger memory budget lets it have all
    ("16", 256, "depth:16,budget:268435456"),  # never below 256 MiB
])
def test_the_read_ahead_follows_the_cores_within_half_the_memory_budget(dlfeed, hdf5_dataset, tmp_path, cores,
                                                                          memory_mb, want):
    summary = tmp_path / "s.json"
    args = [dlfeed.binary, "run", "--quiet", "--epochs", "1", "--batch-size", "16", "--resident", "off",
            "--autotune", "off", "--summary-json", str(summary)]
    if memory_mb:
        args += ["--memory-budget-mb", str(memory_mb)]
    env = dict(os.environ, DLFEED_CORES=cores)  # the machine's defaults for that many cores
    subprocess.run(args + [str(hdf5_dataset)], check=True, capture_output=True, env=env, timeout=120)
    assert json.loads(summary.read_text())["run"]["prefetch"] == want


def test_the_epoch_line_counts_copies_from_held_files_as_the_summary_does(dlfeed, hdf5_dataset, tmp_path):
    """A held dataset's epoch line said "0 I/O operations" where the summary JSON (and the final table)
    counted each copy from memory as one: the line takes them from the same count."""
    summary = tmp_path / "s.json"
    out = dlfeed.run("run", "--epochs", 2, "--batch-size", 10, "--resident", "on", "--summary-json", summary,
                     hdf5_dataset).stdout
    lines = re.findall(r"^epoch (\d+):.*, (\d+) I/O operations\)", out, re.M)
    epochs = json.loads(summary.read_text())["epochs"]
    assert [int(n) for _, n in lines] == [e["io_operations"] for e in epochs], (lines, out)
    assert all(e["io_operations"] > 0 for e in epochs)


def test_a_trace_cap_of_zero_is_refused(dlfeed, hdf5_dataset):
    """--trace-max-events 0 became a cap of 1, silently: it is an error, as --trace-io-sample 0 is."""
    for flag in ("--trace-max-events", "--trace-io-sample"):
        err = dlfeed.error("run", "--trace", "/dev/null", flag, 0, hdf5_dataset)
        assert f"{flag} is at least 1, not 0" in err, err
