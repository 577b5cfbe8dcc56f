# SPDX-License-Identifier: Apache-2.0
"""The Chrome trace of `dlfeed run --trace` against the Trace Event Format
(the JSON Perfetto and chrome://tracing read; no offline Perfetto checker
runs here): the object form with traceEvents, the phases dlfeed writes (X, M,
i, b/e) with each one's required fields, a bounded number of threads however
many reads overlap, complete events that never partly overlap on one thread,
async slices paired by id, every thread and the process named, the epochs
marked. Also: a .json.gz path is the same trace gzip-compressed."""
import gzip
import json
from collections import defaultdict

import pytest

PHASES = {"X", "M", "i", "b", "e"}
MAX_LANES = 16


@pytest.fixture(scope="module")
def run(dlfeed, tmp_path_factory):
    """The issue's case: 3 epochs over 512 samples (8 HDF5 files of 64), reads not coalesced."""
    tmp = tmp_path_factory.mktemp("chrome")
    data = tmp / "d"
    dlfeed.run("generate", "--format", "hdf5", "--dir", data, "--files", 8, "--samples-per-file", 64,
               "--shape", "32,32")
    trace, summary = tmp / "t.json", tmp / "s.json"
    dlfeed.run("run", "--fields", "records", "--epochs", 3, "--batch-size", 16, "--compute-ms", 1,
               "--strategy", "global_shuffle", "--no-coalesce", "--summary-json", summary, "--trace", trace, data)
    return tmp, data, json.loads(trace.read_text()), json.loads(summary.read_text())


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def test_structure_and_required_fields(run):
    _, _, doc, _ = run
    assert isinstance(doc["traceEvents"], list)
    assert doc["displayTimeUnit"] in ("ms", "ns")
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES, e
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index"), e
            key = "sort_index" if e["name"] == "thread_sort_index" else "name"
            assert key in e["args"], e
            continue
        assert number(e["ts"]) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert number(e["dur"]) and e["dur"] >= 0 and isinstance(e["cat"], str), e
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e
        else:  # b / e: async slices need cat and id
            assert isinstance(e["cat"], str) and "id" in e, e


def test_threads_bounded_and_named(run):
    _, _, doc, _ = run
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sum(1 for e in events if e["ph"] == "M" and e["name"] == "process_name") == 1
    used = {e["tid"] for e in events if e["ph"] == "X"}
    assert used <= set(names), f"threads without a name: {used - set(names)}"
    lanes = {e["tid"] for e in events if e["ph"] == "X" and e["name"] == "read"}
    assert 1 <= len(lanes) <= MAX_LANES
    assert all(names[t].startswith("io reads ") for t in lanes)
    # The run made ~142 pseudo-threads; now the loader's threads plus at most 16 lanes.
    assert len(used) <= MAX_LANES + 12, sorted(names[t] for t in used)
    meta = doc["otherData"]["dlfeed_trace"]
    assert meta["io_lanes"] == len(lanes)


def test_no_partial_overlap_on_a_thread(run):
    _, _, doc, _ = run
    per = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            per[e["tid"]].append((start, start + round(e["dur"] * 1000), e["name"]))
    for tid, evs in per.items():
        evs.sort(key=lambda x: (x[0], -x[1]))
        stack = []  # ends of the enclosing events
        for start, end, name in evs:
            while stack and stack[-1][0] <= start:
                stack.pop()
            assert not stack or end <= stack[-1][0], f"{name} [{start},{end}] partly overlaps {stack[-1]} on {tid}"
            stack.append((end, name))
        if all(name == "read" for _, _, name in evs):  # a lane: its reads never overlap at all
            for (s0, e0, _), (s1, _, _) in zip(evs, evs[1:]):
                assert e0 <= s1


def test_async_reads_paired_and_every_read_kept(run):
    _, _, doc, summary = run
    begun, ended = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "b":
            assert e["id"] not in begun
            begun[e["id"]] = e
        elif e["ph"] == "e":
            ended[e["id"]] = e
    assert begun.keys() == ended.keys()
    for i, b in begun.items():
        assert (ended[i]["name"], ended[i]["cat"]) == (b["name"], b["cat"]) == ("read", "io")
        assert ended[i]["ts"] >= b["ts"]
    lane_reads = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "read"]
    assert len(lane_reads) + len(begun) == summary["total"]["io_operations"] == 512 * 3
    assert doc["otherData"]["dlfeed_trace"]["io_reads_async"] == len(begun)
    size = sum(e["args"]["size"] for e in lane_reads) + sum(b["args"]["size"] for b in begun.values())
    assert size == summary["total"]["bytes_read"]


def test_epochs_marked(run):
    _, _, doc, _ = run
    events = doc["traceEvents"]
    spans = sorted((e["ts"], e["args"]["epoch"]) for e in events if e["ph"] == "X" and e["name"] == "epoch")
    marks = sorted((e["ts"], e["args"]["epoch"]) for e in events if e["ph"] == "i")
    assert len(spans) == 3 and marks == spans
    assert [e["name"] for e in sorted((e for e in events if e["ph"] == "i"), key=lambda e: e["ts"])] == [
        f"epoch {n} begins" for _, n in spans]


def test_gz_path_is_the_same_trace_compressed(dlfeed, run):
    tmp, data, _, _ = run
    path = tmp / "t.json.gz"
    dlfeed.run("run", "--fields", "records", "--batch-size", 64, "--trace", path, data)
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw))
    assert any(e["name"] == "read" for e in doc["traceEvents"])


def test_a_pfw_gz_name_gives_the_dftracer_format_unless_told_otherwise(run, dlfeed):
    tmp, data, _, _ = run
    pfw = tmp / "named.pfw.gz"
    dlfeed.run("run", "--fields", "records", "--batch-size", 64, "--trace", pfw, data)
    lines = [ln for ln in gzip.decompress(pfw.read_bytes()).decode().splitlines() if ln.strip() not in ("[", "]", "")]
    first = json.loads(lines[0].rstrip(","))
    assert "ph" in first and "traceEvents" not in first  # one event per line, not Chrome's object form
    chrome = tmp / "told.pfw.gz"
    dlfeed.run("run", "--fields", "records", "--batch-size", 64, "--trace", chrome, "--trace-format", "chrome", data)
    assert "traceEvents" in json.loads(gzip.decompress(chrome.read_bytes()))
