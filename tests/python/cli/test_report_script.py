# SPDX-License-Identifier: Apache-2.0
"""tools/dlfeed_report.py (what `dlfeed report` runs) on real traces: it reads
Chrome and DFTracer traces, plain and .gz, with the same events under
dlfeed's names (reads on lanes and as async slices alike), finds the epochs it
marks on timeline.png, and names the run (dataset, strategy, date) on both
pictures."""
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("dlfeed_report", ROOT / "tools" / "dlfeed_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def runs(dlfeed, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    data = tmp / "d"
    dlfeed.run("generate", "--format", "hdf5", "--dir", data, "--files", 4, "--samples-per-file", 64,
               "--shape", "16,16")
    out = {}
    for name, fmt in (("t.json", "chrome"), ("t.json.gz", "chrome"), ("t.pfw", "dftracer"),
                      ("t.pfw.gz", "dftracer")):
        dlfeed.run("run", "--fields", "records", "--epochs", 2, "--batch-size", 8, "--no-coalesce",
                   "--strategy", "global_shuffle", "--summary-json", tmp / (name + ".s.json"),
                   "--trace", tmp / name, "--trace-format", fmt, data)
        out[name] = (tmp / name, json.loads((tmp / (name + ".s.json")).read_text()))
    return tmp, data, out


def test_every_format_gives_dlfeeds_events(report, runs):
    _, _, out = runs
    for name, (path, summary) in out.items():
        events = report.load_trace(str(path))
        names = Counter(n for n, _, _, _ in events)
        total = summary["total"]
        assert names["read"] == total["io_operations"] == 2 * 256, name
        assert names["epoch"] == 2 and names["decode"] == total["batches"] and names["compute"] == 0, name
        assert names["stall"] >= total["batches"], name
        assert min(ts for _, ts, _, _ in events) == 0.0 and all(d >= 0 for _, _, d, _ in events), name
        epochs = sorted(args["epoch"] for n, _, _, args in events if n == "epoch")
        assert epochs == [0, 1], name


def test_run_is_named(report, runs):
    tmp, data, out = runs
    path, summary = out["t.pfw.gz"]
    meta = report.trace_meta(str(path))
    assert meta["dataset"] == str(data) and meta["time_base_unix_us"] > 0
    label = report.run_label(summary, meta, str(path))
    assert f"dataset {data}" in label and "global_shuffle" in label and "batch 8" in label
    assert " run 20" in label  # the date the run began
    # a trace alone still says where its reads came from and when
    alone = report.run_label(None, report.trace_meta(str(out["t.json"][0])), str(out["t.json"][0]))
    assert f"dataset {data}" in alone and " run 20" in alone


def test_report_command_draws_both_from_a_gz_dftracer_trace(dlfeed, runs):
    pytest.importorskip("matplotlib")
    tmp, _, out = runs
    path, _ = out["t.pfw.gz"]
    proc = dlfeed.run("report", "--out-dir", tmp / "pics", str(path) + ".s.json", path)
    for name in ("breakdown.png", "timeline.png"):
        assert (tmp / "pics" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert name in proc.stdout


def test_report_of_a_folder_or_a_cut_trace_is_an_error_not_a_traceback(dlfeed, runs, tmp_path):
    """A folder, or a .pfw.gz cut short, gave a Python traceback (IsADirectoryError, EOFError)."""
    pytest.importorskip("matplotlib")
    _, _, out = runs
    path, _ = out["t.pfw.gz"]
    cut = tmp_path / "cut.pfw.gz"
    cut.write_bytes(path.read_bytes()[:200])
    for args in ([tmp_path], [cut]):
        err = dlfeed.error("report", "--out-dir", tmp_path / "pics", *args)  # no "Traceback" (dlfeed.error checks)
        assert err.startswith("dlfeed report: "), err
