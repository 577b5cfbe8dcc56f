# SPDX-License-Identifier: Apache-2.0
"""Found by outside testing of the command line: outputs that replaced what stood at their
path, numbers cut or taken in silence, an abort, a file written only after the whole run
into a folder that was missing, JSON that was not, and tracebacks from `dlfeed report`."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for i in range(2):
        np.save(d / f"x_{i}.npy", np.arange(i * 20, (i + 1) * 20, dtype=np.float32).reshape(10, 2))
    return d


def test_summary_json_writes_through_a_link_instead_of_replacing_it(dlfeed, data, tmp_path):
    # It was written beside and renamed over the path: a link (to a results folder, /dev/stdout) or a
    # device node (/dev/full, as root) became a regular file.
    target = tmp_path / "results" / "s.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "s.json"
    link.symlink_to(target)
    dlfeed.run("run", "--quiet", "--summary-json", link, data)
    assert link.is_symlink() and json.loads(target.read_text())["schema"].startswith("dlfeed.counters/")
    proc = dlfeed.run("run", "--quiet", "--summary-json", "/dev/stdout", data)
    assert os.path.exists("/dev/stdout") and '"schema"' in proc.stdout


def test_numbers_out_of_range_are_refused_not_cut_or_ignored(dlfeed, data):
    proc = dlfeed.run("run", "--batch-size", 2**32 + 1, data, check=False)
    assert proc.returncode == 1 and "--batch-size 4294967297: at most 4294967295" in proc.stderr  # was 1
    proc = dlfeed.run("run", "--compute-ms", "inf", data, check=False)
    assert proc.returncode == 1 and "must be finite" in proc.stderr  # was accepted and did nothing
    for flag, value, name in (("--threads", 100000, "threads"), ("--io-threads", 30000, "io.threads"),
                              ("--io-engines", 400, "io_engines")):
        proc = dlfeed.run("run", flag, value, data, check=False)  # an abort or a hang
        assert proc.returncode == 1 and f"{name} ({flag}) is at most" in proc.stderr, proc.stderr


def test_a_missing_output_folder_is_an_error_before_the_run(dlfeed, data, tmp_path):
    proc = dlfeed.run("run", "--epochs", 50, "--summary-json", tmp_path / "no_such_dir" / "s.json", "--trace",
                      tmp_path / "t.json", data, check=False)
    assert proc.returncode == 1 and "no_such_dir does not exist" in proc.stderr
    assert "epoch 0" not in proc.stdout


def test_json_with_a_file_name_that_is_not_utf8_parses(dlfeed, tmp_path):
    d = tmp_path / "raw"
    d.mkdir()
    name = os.fsencode(str(d)) + b"/img_\xff.npy"
    with open(name, "wb") as f:
        np.save(f, np.zeros((3, 2), np.float32))
    proc = dlfeed.run("inspect", "--json", d)
    info = json.loads(proc.stdout)
    assert [os.fsencode(f) for f in info["files"]] == [name]  # the bytes back, as surrogateescape gives them
    dlfeed.run("run", "--quiet", "--trace", tmp_path / "t.json", d)
    json.loads((tmp_path / "t.json").read_text())


def test_report_says_what_it_cannot_draw(dlfeed, data, tmp_path):
    pytest.importorskip("matplotlib")
    dlfeed.run("run", "--quiet", "--epochs", 0, "--summary-json", tmp_path / "e0.json", data)
    dlfeed.run("run", "--quiet", "--summary-json", tmp_path / "e1.json", data)
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads((tmp_path / "e1.json").read_text()), indent=4))
    other = tmp_path / "other.json"
    other.write_text('{"metric": {"au": 1}}')
    env = dict(os.environ, DLFEED_PYTHON=sys.executable)

    def report(*files):
        return subprocess.run([dlfeed.binary, "report", "--out-dir", tmp_path / "out", *map(str, files)],
                              capture_output=True, text=True, env=env)

    proc = report(tmp_path / "e0.json")  # was ValueError: max() arg is an empty sequence
    assert proc.returncode == 0 and "no epochs in the summary" in proc.stdout and "Traceback" not in proc.stderr
    proc = report(pretty)  # pretty-printed: a summary still, not a trace
    assert proc.returncode == 0 and "breakdown.png" in proc.stdout
    proc = report(other)
    assert proc.returncode == 1 and "neither a dlfeed summary" in proc.stderr and "Traceback" not in proc.stderr
    dlio = tmp_path / "dlio_summary.json"  # pretty-printed: was the trace lines' "Expecting property name"
    dlio.write_text(json.dumps({"num_accelerators": 1, "metric": {"train_au_percentage": [90.0]}}, indent=4))
    proc = report(dlio)
    assert proc.returncode == 1 and "a JSON object with the keys num_accelerators, metric" in proc.stderr, proc.stderr
    proc = report(tmp_path / "e1.json", pretty)
    assert proc.returncode == 2 and "two summary files" in proc.stderr
    # A calibration (pretty-printed by calibrate) was "neither ... Expecting property name": said as what it is.
    calibration = tmp_path / "calibration.json"
    dlfeed.run("calibrate", "--max-seconds", 1, "--max-mb", 4, "--out", calibration, data)
    proc = report(calibration)
    assert proc.returncode == 2 and "a dlfeed.calibration/1 file, not a summary" in proc.stderr
    assert "dlfeed run --calibration FILE" in proc.stderr


def test_generate_refuses_shape_typos_and_names_files_it_did_not_write(dlfeed, tmp_path):
    # "--shape 3x" was (3,); generating 2 files where 4 were left a 4-file dataset in silence.
    for typo in ("3x", "3,,4", ",3"):
        proc = dlfeed.run("generate", "--format", "npy", "--dir", tmp_path / "s", "--shape", typo, check=False)
        assert proc.returncode == 1 and f"bad shape '{typo}'" in proc.stderr
    args = ("generate", "--format", "npy", "--dir", tmp_path / "g", "--samples-per-file", 2, "--shape", 2)
    assert "note:" not in dlfeed.run(*args, "--files", 4).stdout
    out = dlfeed.run(*args, "--files", 2).stdout
    assert "also holds 2 data files this run did not write" in out and "img_2.npy" in out


def test_a_batch_size_far_above_the_samples_costs_the_samples_not_the_batch(dlfeed, data, tmp_path):
    # --batch-size 1000000000 on 20 samples took 7.8 GB: each batch's id list was sized by the batch.
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    dlfeed.run("run", "--quiet", "--batch-size", 1_000_000_000, "--summary-json", tmp_path / "s.json", data)
    assert json.loads((tmp_path / "s.json").read_text())["total"]["samples"] == 20
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < max(before, 1) + 2_000_000  # KiB: under 2 GiB


def test_order_names_the_layout_flags_it_cannot_hold(dlfeed):
    # Was "out of memory ... (--batch-size, --trace-max-events, --memory-budget, --shape)", none of them given.
    proc = dlfeed.run("order", "--files", 2**61, "--samples-per-file", 2, check=False)  # 16 EiB: never given
    assert proc.returncode == 1 and "--files 2305843009213693952: the layout keeps 8 bytes a file" in proc.stderr
    proc = dlfeed.run("order", "--files", 2**33, "--samples-per-file", 2**31, check=False)
    assert proc.returncode == 1 and "more samples than a 64-bit id counts" in proc.stderr
    assert dlfeed.run("order", "--files", 3, "--samples-per-file", 2).stdout.split() == [str(i) for i in range(6)]
