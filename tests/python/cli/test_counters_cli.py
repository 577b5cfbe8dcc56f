# SPDX-License-Identifier: Apache-2.0
"""Built-in counters and traces from the command line (docs/counters.md):
values checked against independent measurements (the files' bytes, h5py),
the trace checked for balanced, properly nested events, and the DFTracer
lines parsed one by one."""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

import h5py
import pytest


def dataset_bytes(folder):
    total = 0
    for f in sorted(folder.glob("*.hdf5")):
        with h5py.File(f) as h:
            total += h["records"].nbytes
    return total


@pytest.fixture(scope="module")
def contiguous(tmp_path_factory, dlfeed):
    d = tmp_path_factory.mktemp("counters") / "h5"
    dlfeed.run("generate", "--format", "hdf5", "--dir", d, "--files", 3, "--samples-per-file", 40,
               "--shape", "16,16", "--dtype", "float32")
    return d


def run_json(dlfeed, tmp_path, *args):
    out = tmp_path / "summary.json"
    proc = dlfeed.run("run", "--summary-json", out, *args)
    return json.loads(out.read_text()), proc.stdout


def test_bytes_read_equal_the_dataset_and_coalescing_reduces_requests(dlfeed, contiguous, tmp_path):
    want = dataset_bytes(contiguous)
    s, out = run_json(dlfeed, tmp_path, "--fields", "records", "--strategy", "sequential", "--batch-size", 10,
                      "--no-coalesce", "--resident", "off", contiguous)
    assert s["schema"] == "dlfeed.counters/1"
    e = s["epochs"][0]
    assert e["complete"] and e["samples"] == 120 and e["batches"] == 12 and e["steps"] == 12
    assert e["bytes_read"] == want == s["counters"]["bytes_read"]["value"]
    assert e["planned_reads"] == e["extents"] == 120 and e["coalesced_extents"] == 0
    s2, _ = run_json(dlfeed, tmp_path, "--fields", "records", "--strategy", "sequential", "--batch-size", 10,
                     "--resident", "off", contiguous)
    e2 = s2["epochs"][0]
    assert e2["bytes_read"] == want
    # Sequential batches of 10 contiguous samples, none across a file: one read per batch.
    assert e2["extents"] == 120 and e2["planned_reads"] == 12 and e2["coalesced_extents"] == 108
    assert s2["counters"]["io_latency_ns"]["count"] == 12
    assert "epoch" in out and "latency" in out and "AU%" in out


def test_stall_high_without_compute_and_near_zero_with_compute(dlfeed, contiguous, tmp_path):
    fast, _ = run_json(dlfeed, tmp_path, "--fields", "records", "--batch-size", 8, "--prefetch", "off",
                       "--io", "sync", "--epochs", 10, contiguous)
    for e in fast["epochs"]:
        assert e["compute_s"] == 0 and e["au_percent"] == 0
    # No compute: the consumer spends its time waiting for the loader. Summed
    # over 10 epochs (one is a few ms, where a preemption outside next() on a
    # busy machine would decide the ratio).
    stall = sum(e["stall_s"] for e in fast["epochs"])
    wall = sum(e["wall_s"] for e in fast["epochs"])
    assert stall > 0.3 * wall, fast["epochs"]
    slow, _ = run_json(dlfeed, tmp_path, "--fields", "records", "--batch-size", 8, "--compute-ms", 5,
                       "--prefetch", "depth:4", contiguous)
    e = slow["epochs"][0]
    # Compute (5 ms per step) far exceeds the reads: after the first step the
    # trainer hardly waits, and AU is close to 100%.
    steps_after_first = e["steps"] - 1
    assert e["compute_s"] >= 0.005 * e["steps"] * 0.95
    assert e["stall_s"] - e["first_step_s"] < 0.05 * e["wall_s"], e
    assert e["au_percent"] > 90, e
    assert steps_after_first == 14


def nested_ok(events):
    """Per (pid, tid): sorted by start (longer first), every event ends before
    its enclosing event does."""
    per = defaultdict(list)
    for ev in events:
        if ev.get("ph") != "X":
            continue
        start = round(float(ev["ts"]) * 1000)
        per[(ev["pid"], ev["tid"])].append((start, -round(float(ev["dur"]) * 1000), ev["name"]))
    for key, evs in per.items():
        evs.sort()
        stack = []
        for start, negdur, name in evs:
            end = start - negdur
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:
                assert end <= stack[-1][0], f"{name} [{start},{end}] overlaps {stack[-1][1]} on {key}"
            stack.append((end, name))
    return True


def test_chrome_trace_parses_and_nests(dlfeed, contiguous, tmp_path):
    trace = tmp_path / "t.json"
    s, out = run_json(dlfeed, tmp_path, "--fields", "records", "--batch-size", 8, "--epochs", 2,
                      "--compute-ms", 1, "--strategy", "global_shuffle", "--no-coalesce", "--trace", trace, contiguous)
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    meta = doc["otherData"]["dlfeed_trace"]
    assert meta["max_events"] == 500000 and meta["dropped"] == 0
    names = defaultdict(int)
    for ev in events:
        if ev["ph"] == "X":
            names[ev["name"]] += 1
            assert ev["dur"] >= 0
        elif ev["ph"] == "b":  # reads beyond the io lanes: async slices (test_trace_formats.py)
            names[ev["name"]] += 1
    assert names["read"] == 240 and names["decode"] == 30 and names["plan"] == 30
    assert names["epoch"] == 2 and names["compute"] == 30 and names["step"] == 30
    assert nested_ok(events)
    reads = [ev for ev in events if ev["name"] == "read" and ev["ph"] in "Xb"]
    assert all(ev["args"]["fname"].endswith(".hdf5") for ev in reads)
    assert sum(ev["args"]["size"] for ev in reads) == 2 * dataset_bytes(contiguous)


def test_trace_cap_and_sampling_are_said_in_the_file(dlfeed, contiguous, tmp_path):
    trace = tmp_path / "t.json"
    dlfeed.run("run", "--fields", "records", "--batch-size", 8, "--no-coalesce", "--trace", trace,
               "--trace-max-events", 50, "--trace-io-sample", 4, contiguous)
    doc = json.loads(trace.read_text())
    meta = doc["otherData"]["dlfeed_trace"]
    assert meta["max_events"] == 50 and meta["io_sample_every"] == 4
    assert meta["recorded"] == 50 and meta["dropped"] > 0
    assert sum(1 for ev in doc["traceEvents"] if ev["ph"] == "X") == 50
    assert nested_ok(doc["traceEvents"])


def test_dftracer_lines_parse_one_by_one(dlfeed, contiguous, tmp_path):
    trace = tmp_path / "t.pfw"
    dlfeed.run("run", "--fields", "records", "--batch-size", 8, "--compute-ms", 1, "--trace", trace,
               "--trace-format", "dftracer", contiguous)
    lines = trace.read_text().splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    events = [json.loads(line) for line in lines[1:-1]]
    for ev in events:
        for key in ("name", "cat", "pid", "tid", "ph", "args"):
            assert key in ev, ev
        if ev["ph"] == "X":
            assert isinstance(ev["ts"], int) and isinstance(ev["dur"], int)
    assert events[0]["name"] == "dlfeed_trace" and events[0]["args"]["dropped"] == 0
    # DFTracer's names (POSIX pread, pipeline epoch.block ...), dlfeed's in args (test_dftracer_tools.py)
    assert {"read", "decode", "stall", "compute", "step", "epoch"} <= {ev["args"].get("dlfeed") for ev in events}


def test_bad_trace_format_is_refused(dlfeed, contiguous):
    err = dlfeed.error("run", "--trace", "/tmp/x", "--trace-format", "svg", contiguous)
    assert "trace-format" in err


def test_report_draws_pngs(dlfeed, contiguous, tmp_path):
    pytest.importorskip("matplotlib")
    trace = tmp_path / "t.json"
    summary = tmp_path / "s.json"
    dlfeed.run("run", "--fields", "records", "--batch-size", 8, "--epochs", 2, "--compute-ms", 1,
               "--summary-json", summary, "--trace", trace, contiguous)
    out = tmp_path / "pics"
    proc = dlfeed.run("report", "--out-dir", out, summary, trace)
    for name in ("breakdown.png", "timeline.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert name in proc.stdout
    err = dlfeed.error("report", "--out-dir", out)
    assert "summary" in err
    dft = tmp_path / "t.pfw"
    dlfeed.run("run", "--fields", "records", "--batch-size", 8, "--trace", dft, "--trace-format", "dftracer",
               contiguous)
    dlfeed.run("report", "--out-dir", tmp_path / "pics2", dft)
    assert (tmp_path / "pics2" / "timeline.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("trace", [False, True])
def test_a_trainer_waiting_for_the_hold_waits_on_io(dlfeed, tmp_path, trace):
    # With resident=auto on a cold cache the hold's reads of the files counted as no I/O: the trainer
    # waited 99% of the epoch while io_exposed_s said 0.015 s, with --trace on (found by outside testing).
    data = tmp_path / "cold"
    dlfeed.run("generate", "--format", "npy", "--files", 8, "--samples-per-file", 32, "--shape", "256,256",
               "--dtype", "float32", data)  # 64 MiB
    out = tmp_path / "s.json"
    args = ["run", "--epochs", 1, "--batch-size", 16, "--resident", "auto", "--evict", "--summary-json", out]
    if trace:
        args += ["--trace", tmp_path / "t.json"]
    dlfeed.run(*args, data)
    e = json.loads(out.read_text())["epochs"][0]
    assert e["io_busy_s"] > 0 and e["io_exposed_s"] >= 0.5 * e["stall_s"], e
