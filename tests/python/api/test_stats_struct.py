# SPDX-License-Identifier: Apache-2.0
"""Loader.stats() is a bound struct (dlfeed._dlfeed.LoaderStats): typed,
read-only attributes, and the dict-like access code has always used
(stats()["bytes_read"], stats()["stage"]["done"], keys(), to_dict())."""
import json

import pytest

import dlfeed

KEYS = ["batches", "samples", "bytes_delivered", "bytes_read", "planned_reads", "io_operations", "extents", "peak_in_flight_bytes",
        "pool_allocations", "pool_reuses", "io_backend", "lookahead_batches", "held_batches", "io_engines",
        "io_engines_made", "autotune", "autotune_changes", "threads", "cores", "decode_peak", "batches_spread",
        "split_records", "split_records_whole",
        "io_fallback_reason", "files",
        "resident_bytes", "resident_reason", "memory_budget", "memory_budget_reason", "unpacked_bytes", "unpacked_reason", "prefetch", "route", "stage"]
STAGE_KEYS = ["files", "staged", "reused", "skipped_limit", "skipped_space", "failed", "bytes_copied", "bytes_staged",
              "bytes_skipped", "done", "first_error", "files_read_staged"]


def test_attributes_and_dict_access_agree(learnable):  # noqa: F811
    root, x, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=32, resident="off")
    n = sum(len(b) for b in loader)
    s = loader.stats()
    assert isinstance(s, dlfeed._dlfeed.LoaderStats)
    assert s.keys() == KEYS and list(s) == KEYS and len(s) == len(KEYS)
    assert s.samples == s["samples"] == n == len(x)
    assert s.batches == s["batches"] == (n + 31) // 32
    assert s.bytes_delivered == s["bytes_delivered"] == n * (8 * 8 * 4 + 8)
    assert s.bytes_read >= s.bytes_delivered > 0
    assert s.files == 4 and s.resident_bytes == 0 and "resident is off" in s.resident_reason
    assert s.route == "pipeline" and s.prefetch.startswith("depth:8")
    assert "bytes_read" in s and "nonsense" not in s
    assert s.get("nonsense", 7) == 7 and s.get("files") == 4
    with pytest.raises(KeyError):
        s["nonsense"]
    with pytest.raises(AttributeError):
        s.batches = 0  # read-only
    assert s.stage.keys() == STAGE_KEYS and s["stage"]["done"] is s.stage.done
    assert s.stage.files_read_staged == 0


def test_to_dict_is_plain_and_json_ready(learnable):  # noqa: F811
    root, _, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x"], batch_size=16)
    for _ in loader:
        pass
    d = loader.stats().to_dict()
    assert type(d) is dict and list(d) == KEYS and type(d["stage"]) is dict and list(d["stage"]) == STAGE_KEYS
    assert json.loads(json.dumps(d)) == d
    assert dict(loader.stats().items()) == d
    assert d["samples"] == loader.num_samples
