# SPDX-License-Identifier: Apache-2.0
"""dlfeed's DFTracer traces read by DFTracer's own tools (dftracer-utils on
PyPI): `dftracer_validate` accepts the .pfw.gz, and `dftracer_view --preset
dlio` / `--preset io` find dlfeed's steps, compute, data loading and reads,
as many per category as dlfeed's own counters say it did.

dftracer-utils is not one of the test requirements: it is installed into a
venv of its own, never the test venv. The venv is $DLFEED_DFTRACER_VENV if
set (used as it is when it already has the tools), else dftracer-venv/ beside
the build (build/dftracer-venv), created on first use with pip (about 10 s and
75 MB). The test skips only when PyPI cannot be reached to install it.
"""
import gzip
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

# The version these tests were checked against (its presets' category lists).
DFTRACER_UTILS = "dftracer-utils==0.0.14"


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def _venv_dir(dlfeed) -> Path:
    env = os.environ.get("DLFEED_DFTRACER_VENV")
    if env:
        return Path(env)
    build = Path(dlfeed.binary).resolve().parent.parent  # build/tools/dlfeed -> build
    return build / "dftracer-venv"


@pytest.fixture(scope="session")
def dft(dlfeed):
    """The folder holding dftracer_validate and dftracer_view."""
    venv = _venv_dir(dlfeed)
    bindir = venv / "bin"
    if (bindir / "dftracer_view").exists() and (bindir / "dftracer_validate").exists():
        return bindir
    if not _pypi_reachable():
        pytest.skip(f"PyPI (pypi.org:443) is unreachable: cannot install {DFTRACER_UTILS} into {venv}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
    proc = subprocess.run([str(bindir / "pip"), "install", "--disable-pip-version-check", "--cache-dir",
                           str(venv.parent / "dftracer-pip-cache"), DFTRACER_UTILS],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"pip install {DFTRACER_UTILS} into {venv} failed:\n{proc.stdout}\n{proc.stderr}"
    return bindir


@pytest.fixture(scope="module")
def traced_run(dlfeed, tmp_path_factory):
    """A 3-epoch run over 512 samples (8 HDF5 files of 64), its DFTracer trace and its summary."""
    tmp = tmp_path_factory.mktemp("dft")
    data = tmp / "d"
    dlfeed.run("generate", "--format", "hdf5", "--dir", data, "--files", 8, "--samples-per-file", 64,
               "--shape", "32,32")
    trace, summary = tmp / "run.pfw.gz", tmp / "summary.json"
    dlfeed.run("run", "--fields", "records", "--epochs", 3, "--batch-size", 16, "--compute-ms", 1,
               "--strategy", "global_shuffle", "--no-coalesce", "--summary-json", summary,
               "--trace", trace, "--trace-format", "dftracer", data)
    return tmp, trace, json.loads(summary.read_text())


def view(dft, tmp, trace, *args):
    """dftracer_view's output rows (JSON lines on stdout; its log goes to stderr)."""
    proc = subprocess.run([str(dft / "dftracer_view"), "--files", str(trace), "--index-dir", str(tmp / "index"),
                           *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def counts(rows):
    return {(r["cat"], r["name"]): r["count"] for r in rows}


def test_trace_is_gzip_with_one_json_object_per_line(traced_run):
    _, trace, _ = traced_run
    raw = trace.read_bytes()
    assert raw[:2] == b"\x1f\x8b", "a .gz trace is gzip-compressed"
    lines = gzip.decompress(raw).decode().splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    events = [json.loads(line) for line in lines[1:-1]]
    meta = [e for e in events if e["ph"] == "M"]
    assert {"HH", "FH", "thread_name", "process_name"} <= {e["name"] for e in meta}
    hhash = next(e["args"]["value"] for e in meta if e["name"] == "HH")
    files = {e["args"]["value"]: e["args"]["name"] for e in meta if e["name"] == "FH"}
    assert len(files) == 8 and all(name.endswith(".hdf5") for name in files.values())
    for e in events:
        if e["ph"] == "X":
            assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["args"]["hhash"] == hhash
    reads = [e for e in events if e["ph"] == "X" and e["cat"] == "POSIX"]
    # every read names its file through the FH table, and keeps dlfeed's own detail
    assert all(files[e["args"]["fhash"]] == e["args"]["fname"] for e in reads)


def test_dftracer_validate_accepts_it(dft, traced_run):
    _, trace, _ = traced_run
    proc = subprocess.run([str(dft / "dftracer_validate"), "--files", str(trace)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 0 failed" in proc.stdout, proc.stdout


def test_dlio_preset_finds_epochs_steps_compute_and_loading(dft, traced_run):
    tmp, trace, summary = traced_run
    total = summary["total"]
    got = counts(view(dft, tmp, trace, "--preset", "dlio", "--group-by", "cat,name", "--agg", "count"))
    assert got[("pipeline", "epoch.block")] == 3
    assert got[("pipeline", "train")] == 1 and got[("ai_root", "ai_root")] == 1
    assert got[("pipeline", "step")] == total["steps"] == 96
    assert got[("compute", "compute")] == 96
    assert got[("data", "item")] == total["batches"] == 96  # decode, one per batch
    assert got[("data", "preprocess.collate")] == 96
    assert got[("dataloader", "plan")] == 96
    assert got[("dataloader", "fetch.iter")] >= 96  # the trainer's waits for a batch
    assert got[("reader", "index.open")] == 1
    # the reads are POSIX, not in the dlio view
    assert not any(cat.lower() == "posix" for cat, _ in got)


def test_io_preset_finds_every_read_with_its_bytes(dft, traced_run):
    tmp, trace, summary = traced_run
    total = summary["total"]
    got = counts(view(dft, tmp, trace, "--preset", "io", "--group-by", "cat,name", "--agg", "count"))
    assert {name for _, name in got} == {"pread"}
    assert sum(got.values()) == total["io_operations"] == 512 * 3
    reads = view(dft, tmp, trace, "--preset", "io")
    assert len(reads) == total["io_operations"]
    assert sum(r["args"]["size"] for r in reads) == total["bytes_read"]
    assert Counter(r["args"]["dlfeed"] for r in reads) == {"read": total["io_operations"]}


def test_python_loader_writes_gzip_dftracer(dft, traced_run, tmp_path):
    dlfeed = pytest.importorskip("dlfeed")
    tmp, _, _ = traced_run
    loader = dlfeed.Loader(tmp / "d", fields=["records"], batch_size=32, trace=True)
    steps = sum(1 for _ in loader)
    path = tmp_path / "py.pfw.gz"
    loader.write_trace(path, format="dftracer")
    proc = subprocess.run([str(dft / "dftracer_validate"), "--files", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = counts(view(dft, tmp_path, path, "--preset", "dlio", "--group-by", "cat,name", "--agg", "count"))
    assert got[("pipeline", "epoch.block")] == 1 and got[("data", "item")] == steps == 16
