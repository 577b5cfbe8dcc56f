# SPDX-License-Identifier: Apache-2.0
"""`dlfeed calibrate` and efficiency in `dlfeed run` (docs/workloads.md):
the calibration JSON describes the dataset as h5py sees it and holds
positive measurements; the files' pages are dropped (checked with mincore
through ctypes, independently of dlfeed); run's efficiency is its MiB/s over
the limit of the pattern its strategy maps to; calibrations of other
datasets and malformed files are refused with the file named. Speeds are
never asserted."""
import ctypes
import ctypes.util
import json
import mmap
import os

import h5py
import pytest

MIB = 1 << 20


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, dlfeed):
    d = tmp_path_factory.mktemp("calibrate") / "h5"
    dlfeed.run("generate", "--format", "hdf5", "--dir", d, "--files", 4, "--samples-per-file", 64,
               "--shape", "32,64", "--dtype", "uint8")
    return d


def h5_facts(folder):
    """(files, samples, bytes of the records) as h5py sees them."""
    files = sorted(folder.glob("*.hdf5"))
    samples = nbytes = 0
    for f in files:
        with h5py.File(f) as h:
            samples += h["records"].shape[0]
            nbytes += h["records"].nbytes
    return len(files), samples, nbytes


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(path):
    """Pages of `path` in the page cache (mincore), independent of dlfeed."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = ctypes.create_string_buffer(pages)
        assert _libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
        _libc.munmap(addr, size)
        return sum(b & 1 for b in vec.raw)
    finally:
        os.close(fd)


def warm(folder):
    for f in folder.glob("*.hdf5"):
        f.read_bytes()


def calibrate(dlfeed, path, out, *args):
    proc = dlfeed.run("calibrate", "--out", out, *args, path)
    return json.loads(out.read_text()), proc.stdout


def test_calibration_describes_the_dataset_with_positive_measurements(dlfeed, dataset, tmp_path):
    c, out = calibrate(dlfeed, dataset, tmp_path / "c.json", "--qd", 16)
    files, samples, nbytes = h5_facts(dataset)
    assert c["schema"] == "dlfeed.calibration/1"
    ds = c["dataset"]
    assert (ds["files"], ds["samples"], ds["bytes"]) == (files, samples, nbytes)
    assert ds["sample_bytes"] == nbytes / samples and ds["field"] == "data"  # the default field, as the loader names it
    assert len(ds["fingerprint"]) == 16
    assert set(c["patterns"]) == {"sequential", "random"}
    assert c["patterns"]["sequential"]["strategy"] == "sequential"
    assert c["patterns"]["random"]["strategy"] == "global_shuffle"
    for p in c["patterns"].values():
        readers = p["readers"]
        assert set(readers) == {"io_uring", "pread"}
        assert readers["io_uring"]["queue_depth"] == 16 and readers["pread"]["queue_depth"] == 1
        for r in readers.values():
            # The whole dataset fits the default bound: every sample read once.
            assert r["samples"] == samples and r["bytes"] == nbytes and r["requests"] == samples
            assert r["seconds"] > 0 and r["mib_per_s"] > 0 and r["samples_per_s"] > 0
            assert r["mib_per_s"] == pytest.approx(r["bytes"] / r["seconds"] / MIB, rel=1e-6)
            assert r["truncated"] is False
        best = max(readers, key=lambda k: readers[k]["mib_per_s"])
        assert p["limit_mib_per_s"] == readers[best]["mib_per_s"]
        assert p["limit_reader"] == ("pread" if best == "pread" else "io_uring QD16")
    assert "limits: " in out and "io_uring QD16" in out


def test_calibrate_drops_the_files_pages(dlfeed, dataset, tmp_path):
    files = sorted(dataset.glob("*.hdf5"))
    warm(dataset)
    if sum(resident_pages(f) for f in files) == 0:
        pytest.skip("reading the files left nothing in the page cache")
    before = sum(resident_pages(f) for f in files)
    out = dlfeed.run("calibrate", "--evict-only", dataset).stdout
    left = sum(resident_pages(f) for f in files)
    if left == before:
        pytest.skip("this file system ignores POSIX_FADV_DONTNEED (tmpfs?)")
    assert left == 0 and f"evicted {len(files)} files; 0 bytes still cached" in out
    # A calibration evicts before each measurement and says whether it worked.
    warm(dataset)
    c, _ = calibrate(dlfeed, dataset, tmp_path / "c.json", "--patterns", "random")
    assert c["eviction"] == {"files": len(files), "resident_bytes_after": 0, "effective": True}


def test_measurements_are_bounded(dlfeed, dataset, tmp_path):
    c, _ = calibrate(dlfeed, dataset, tmp_path / "c.json", "--max-mb", 0.1, "--patterns", "sequential")
    sample = 32 * 64
    for r in c["patterns"]["sequential"]["readers"].values():
        # Stops after the sample that reaches 0.1 MiB: a prefix of the order.
        assert r["bytes"] == -(-int(0.1 * MIB) // sample) * sample
        assert r["truncated"] is True
    assert c["settings"]["max_bytes"] == int(0.1 * MIB)


def run_json(dlfeed, tmp_path, *args):
    out = tmp_path / "run.json"
    proc = dlfeed.run("run", "--summary-json", out, *args)
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.parametrize("strategy,pattern", [("sequential", "sequential"), ("file_shuffle", "sequential"),
                                              ("block_shuffle", "sequential"), ("global_shuffle", "random"),
                                              ("global_feistel", "random")])
def test_efficiency_is_mib_per_s_over_the_patterns_limit(dlfeed, dataset, tmp_path, strategy, pattern):
    cal = tmp_path / "c.json"
    c, _ = calibrate(dlfeed, dataset, cal)
    s, out = run_json(dlfeed, tmp_path, "--calibration", cal, "--strategy", strategy, "--epochs", 2,
                      "--evict", "--fields", "records", dataset)
    run = s["run"]
    _, samples, nbytes = h5_facts(dataset)
    limit = c["patterns"][pattern]["limit_mib_per_s"]
    assert run["pattern"] == pattern and run["evict"] is True
    assert run["calibration"]["limit_mib_per_s"] == pytest.approx(limit, rel=1e-9)
    assert run["calibration"]["auto_detected"] is False
    assert run["record_bytes"] == nbytes / samples
    for mine, counters in zip(run["epochs"] + [run["total"]], s["epochs"] + [s["total"]]):
        assert mine["samples_per_s"] == pytest.approx(counters["samples_per_s"], rel=1e-6)
        assert mine["io_mib_per_s"] == pytest.approx(counters["samples_per_s"] * nbytes / samples / MIB, rel=1e-6)
        assert mine["efficiency"] == pytest.approx(mine["io_mib_per_s"] / limit, rel=1e-6)
        assert mine["au_percent"] == pytest.approx(counters["au_percent"], rel=1e-6)
    assert f"efficiency {run['epochs'][0]['efficiency'] * 100:.1f}% of the {pattern} limit" in out


def test_a_pattern_measured_for_the_strategy_itself_wins(dlfeed, dataset, tmp_path):
    cal = tmp_path / "c.json"
    c, _ = calibrate(dlfeed, dataset, cal, "--patterns", "sequential,random,block_shuffle", "--block-size", 16)
    assert c["patterns"]["block_shuffle"]["strategy"] == "block_shuffle"
    s, _ = run_json(dlfeed, tmp_path, "--calibration", cal, "--strategy", "block_shuffle", dataset)
    assert s["run"]["pattern"] == "block_shuffle"
    assert s["run"]["calibration"]["limit_mib_per_s"] == c["patterns"]["block_shuffle"]["limit_mib_per_s"]


def test_run_finds_the_calibration_written_for_its_folder(dlfeed, dataset, tmp_path):
    s, _ = run_json(dlfeed, tmp_path, dataset)
    assert s["run"]["calibration"] is None and s["run"]["total"]["efficiency"] is None
    dlfeed.run("calibrate", "--patterns", "random", dataset)
    default = dataset / "dlfeed-calibration.json"
    assert default.exists()
    try:
        s, _ = run_json(dlfeed, tmp_path, "--strategy", "global_shuffle", dataset)
        assert s["run"]["calibration"]["auto_detected"] is True
        assert s["run"]["calibration"]["file"] == str(default)
        assert s["run"]["total"]["efficiency"] > 0
        # Sequential maps to a pattern this file lacks: no efficiency, no error.
        s, out = run_json(dlfeed, tmp_path, "--strategy", "sequential", dataset)
        assert s["run"]["calibration"] is None and "no efficiency" in out
    finally:
        default.unlink()


def test_calibration_of_another_dataset_is_refused(dlfeed, dataset, tmp_path):
    other = tmp_path / "other"
    dlfeed.run("generate", "--format", "hdf5", "--dir", other, "--files", 4, "--samples-per-file", 64,
               "--shape", "32,65")  # same counts, other file sizes
    cal = tmp_path / "c.json"
    calibrate(dlfeed, other, cal, "--patterns", "random")
    err = dlfeed.error("run", "--calibration", cal, dataset)
    assert str(cal) in err and "another dataset" in err and str(dataset) in err


@pytest.mark.parametrize("text,expected", [
    ("{\"schema\": \"dlfeed.calibration/1\", ", "offset 35"),
    ("[1, 2]", "to be an object"),
    ("{\"schema\": \"something/2\"}", "dlfeed.calibration/1"),
    ("{\"schema\": \"dlfeed.calibration/1\"}", "\"dataset\""),
])
def test_malformed_calibration_names_the_file_and_what_was_expected(dlfeed, dataset, tmp_path, text, expected):
    cal = tmp_path / "bad.json"
    cal.write_text(text)
    err = dlfeed.error("run", "--calibration", cal, dataset)
    assert str(cal) in err and expected in err and "expected" in err


def test_a_bad_limit_names_its_offset(dlfeed, dataset, tmp_path):
    cal = tmp_path / "c.json"
    c, _ = calibrate(dlfeed, dataset, cal, "--patterns", "random")
    c["patterns"]["random"]["limit_mib_per_s"] = -3
    text = json.dumps(c)
    cal.write_text(text)
    err = dlfeed.error("run", "--calibration", cal, dataset)
    key = '"limit_mib_per_s": -3'
    assert f"offset {text.index(key) + len(key) - 2}" in err and "limit_mib_per_s to be a positive number" in err
    err = dlfeed.error("run", "--calibration", tmp_path / "missing.json", dataset)
    assert "missing.json" in err
