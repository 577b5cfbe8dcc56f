# SPDX-License-Identifier: Apache-2.0
"""Smoke tests of the benchmark scripts on tiny datasets: they run end to end
and report every system with positive numbers. No speed is asserted.

bench/compare/compare.py --quick runs each system in its own process; to stay
well under a minute on a busy 2-core machine the test runs the cold cache and
one DataLoader worker count (2), so every system appears once.
"""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def build_dir() -> pathlib.Path:
    binary = os.environ.get("DLFEED_BIN")
    return pathlib.Path(binary).resolve().parents[1] if binary else ROOT / "build"


def need_built(*rel):
    missing = [r for r in rel if not (build_dir() / r).exists()]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)} (scripts/setup.sh builds them)")


def run_script(script, *args, timeout=240):
    env = dict(os.environ, DLFEED_BUILD_DIR=str(build_dir()), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, f"{script} failed\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_compare_quick_reports_every_system(tmp_path):
    for mod in ("torch", "tensorflow", "h5py"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed: the comparison needs PyTorch, TensorFlow and h5py")
    need_built("tools/dlfeed", "bench/raw_read", "bench/compare_cpp")
    if not list((build_dir() / "python" / "dlfeed").glob("_dlfeed*.so")):
        pytest.skip("the _dlfeed Python extension is not built")
    results_path = tmp_path / "results.json"
    out = run_script("bench/compare/compare.py", "--quick", "--workers", "2", "--data", tmp_path / "data",
                     "--json", results_path)
    assert "ERROR" not in out
    res = json.loads(results_path.read_text())
    assert res["skipped"] == []
    want = {
        "hdf5": {"device", "dlfeed_cpp", "dlfeed_py", "dlfeed_torch", "torch_h5py_w2"},
        "npy": {"device", "dlfeed_cpp", "dlfeed_py", "torch_npy_w2"},
        "tfrecord": {"device", "dlfeed_cpp", "dlfeed_py", "dlfeed_tf", "tf_data"},
    }
    assert set(res["summary"]) == set(want)
    for scenario, systems in want.items():
        table = res["summary"][scenario]
        assert set(table) == systems, scenario
        for key, caches in table.items():
            cold = caches["cold"]
            assert cold["samples_s"] > 0 and cold["mib_s"] > 0 and cold["peak_rss_mib"] > 0, (scenario, key)
            if key != "device":
                assert cold["eff"] > 0, (scenario, key)
        # The markdown table printed in quick mode has a row per system.
        for s in res["scenarios"][scenario]["systems"]:
            assert f"| {s['label']} |" in out
    # Same bytes delivered by every system (the order-independent touch sums agree).
    for scenario, table in res["summary"].items():
        sums = {t for k, c in table.items() if k != "device" for t in c["cold"]["touch"]}
        assert len(sums) == 1, (scenario, sums)


def test_shuffle_sweep_quick_scores_every_strategy(tmp_path):
    need_built("tools/dlfeed", "bench/raw_read", "bench/compare_cpp")
    out = run_script("bench/shuffle/sweep.py", "--quick", "--caches", "cold", "--no-micro", "--data",
                     tmp_path / "data")
    res = json.loads((tmp_path / "data" / "quick" / "results.json").read_text())
    strategies = {e["strategy"] for e in res["configs"]}
    assert strategies >= {"sequential", "file_shuffle", "local_shuffle", "buffered_shuffle", "block_shuffle",
                          "global_shuffle", "global_feistel"}
    for e in res["configs"]:
        assert e["median"]["cold"]["samples_s"] > 0, e["label"]
        assert 0 <= e["quality"]["score"] <= 1, e["label"]
    by = {e["label"]: e["quality"]["score"] for e in res["configs"]}
    assert by["sequential"] == 0 and by["file_shuffle"] == 0 and by["global_shuffle"] > 0.9
    assert (tmp_path / "data" / "quick" / "shuffle_frontier.png").stat().st_size > 0
    assert "pick (cold):" in out


def test_micro_benches_run(tmp_path):
    need_built("bench/parse_bench", "bench/order_bench", "bench/counters_bench")
    run_script("bench/shuffle/sweep.py", "--quick", "--no-sweep", "--data", tmp_path / "data")
    rows = json.loads((tmp_path / "data" / "quick" / "micro.json").read_text())
    names = {r["name"].split("/")[0] for r in rows}
    assert {"BM_NpyHeaderParse", "BM_TfrecordFraming", "BM_TfrecordUnframe", "BM_ExampleFeatures", "BM_Crc32c",
            "BM_Epoch", "BM_RecordSample"} <= names
    assert all(r["ns"] > 0 for r in rows if not r["error"])


def test_tf_adaptor_quick_reports_every_system(tmp_path):
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    need_built("tools/dlfeed")
    if not list((build_dir() / "python" / "dlfeed").glob("_dlfeed*.so")):
        pytest.skip("the _dlfeed Python extension is not built")
    results_path = tmp_path / "results.json"
    out = run_script("bench/tf_adaptor.py", "--quick", "--data", tmp_path / "data", "--json", results_path)
    assert "ERROR" not in out
    res = json.loads(results_path.read_text())
    assert set(res["runs"]) == {"dlfeed_py", "dlfeed_tf", "tf_data"}
    for system, runs in res["runs"].items():
        assert len(runs) == 1 and runs[0]["samples"] == 256, system  # 4 files x 64 samples, all delivered
        assert runs[0]["samples_s"] > 0 and runs[0]["cpu_s"] > 0 and runs[0]["peak_rss_kib"] > 0, system
    assert len({r["touch"] for runs in res["runs"].values() for r in runs}) == 1  # the same bytes
    assert set(res["breakdown"]) == {"loader", "tf_floor", "dlfeed_tf"}
    for case, v in res["breakdown"].items():
        assert v["wall"] > 0 and v["cpu"] > 0, case
    assert set(res["fit"]) == {"dlfeed_tf", "tf_data"}
    assert all(len(v) == 2 and min(v) > 0 for v in res["fit"].values())  # model.fit: 2 timed epochs each
    assert "| dlfeed.tf.dataset |" in out


def test_scale_quick_measures_every_format(tmp_path):
    need_built("tools/dlfeed")
    results_path = tmp_path / "scale.json"
    out = run_script("bench/scale.py", "--quick", "--data", tmp_path / "data", "--json", results_path)
    res = json.loads(results_path.read_text())
    for series, sizes in (("files", {100, 1000}), ("samples", {10_000, 100_000})):
        rows = res[series]
        assert {r["format"] for r in rows} == {"tfrecord", "hdf5", "npz", "npy"}, series
        for fmt in ("tfrecord", "hdf5", "npz", "npy"):
            got = {r["files"] if series == "files" else r["samples"] for r in rows if r["format"] == fmt}
            assert got == sizes, (series, fmt)
        for r in rows:
            new = r["results"]["new"]
            assert new["first_s"] > 0 and new["reopen_s"] > 0 and new["rss_mib"] > 0, r
    # The datasets are gone (only the plots stay) and the markdown has a row per point.
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["scale_files.png", "scale_samples.png"]
    assert out.count("| TFRecord (+.idx) |") == 4


def test_npz_once_quick_reports_every_dataset(tmp_path):
    need_built("tools/dlfeed")
    if not list((build_dir() / "python" / "dlfeed").glob("_dlfeed*.so")):
        pytest.skip("the _dlfeed Python extension is not built")
    out = run_script("bench/npz_once.py", "--quick", "--data", tmp_path / "data")
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| dataset")]
    assert len(rows) == 6, out
    # Unpacked, a DLIO array is read once: read / delivered 1.00.
    assert all(" | 1.00 (" in r for r in rows if r.startswith("| DLIO NP") and "budget" not in r), out


def test_gpu_feed_quick_runs_the_cpu_parts_and_says_what_it_skipped(tmp_path):
    for mod in ("torch", "h5py"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed: bench/gpu_feed.py needs PyTorch and h5py")
    if not list((build_dir() / "python" / "dlfeed").glob("_dlfeed*.so")):
        pytest.skip("the _dlfeed Python extension is not built")
    import torch

    out_dir = tmp_path / "out"
    out = run_script("bench/gpu_feed.py", out_dir, "--quick", "--cpu", "--data", tmp_path / "data", timeout=120)
    res = json.loads((out_dir / "gpu_feed.json").read_text())
    cases = {r["case"]: r for r in res["results"]}
    for case in ("cpu", "held_0", "held_2", "held_4", "held_8", "held_0_again"):
        assert "error" not in cases[case], cases[case]
        hold = 0 if case == "cpu" else int(case.split("_")[1])
        assert cases[case]["samples_s"] > 0 and cases[case]["hold"] == hold, cases[case]
    assert "skipped" in res and "device parts" in res["skipped"] and "skipped" in out
    targets = {t["target"]: t for t in res["targets"]}
    assert targets["8 held / none (CPU-only loader)"]["value"] > 0
    assert targets["GPU delivered / min(CPU-only, pinned copy)"]["value"] is None  # not measured without CUDA
    if not torch.cuda.is_available():
        assert "CUDA is not available" in cases["no_cuda"]["device_error"]
        assert cases["no_cuda"]["pin_warning"] and cases["no_cuda"]["pin_batches_ok"]
    for case, overlap in (("boundary_off", False), ("boundary_on", True)):  # the waits at epoch boundaries
        assert "error" not in cases[case], cases[case]
        assert cases[case]["overlap_epochs"] is overlap and cases[case]["wait_ms_epoch_start"] is not None
        assert cases[case]["wait_ms_mid"] is not None, cases[case]
    # The device feed's structure on the CPU (the tests' HostStream for CUDA): it runs, and says what next() costs.
    case = cases["consumer_overhead_host"]
    assert "error" not in case and case["host_stand_in"] is True and case["batches"] > 0, case
    assert case["next_us_median"] > 0 and case["h2d"]["copies"] >= case["batches"]
    md = (out_dir / "gpu_feed.md").read_text()
    assert "| held_8 |" in md and "| target |" in md


def test_node_scaling_quick_measures_every_case(tmp_path):
    """bench/node_scaling.py from the Python API alone: every case measured, JSON and markdown written."""
    for mod in ("torch", "h5py"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed")
    if not list((build_dir() / "python" / "dlfeed").glob("_dlfeed*.so")):
        pytest.skip("the _dlfeed Python extension is not built")
    out = tmp_path / "ns"
    run_script("bench/node_scaling.py", "--out", out, "--quick", "--seconds", 0.2)
    res = json.loads((out / "node_scaling.json").read_text())
    groups = {key.split("|")[0] for key in res["results"]}
    # E (TFRecord vs HDF5) and the command rows need the `dlfeed` command (DLFEED_BIN or build/tools).
    assert len(groups) == (5 if (build_dir() / "tools" / "dlfeed").exists() else 4), groups
    for key, r in res["results"].items():
        assert r["errors"] == [], (key, r["errors"])
        assert len(r["rates"]) == 1 and r["rates"][0] > 0, key
    held = res["results"]["B held vs read (defaults)|held (resident=on)"]
    assert held["used"]["route"] == "gather"
    assert "node_scaling" in (out / "node_scaling.md").read_text()


def test_indexed_binary_quick_reports_both_readers(tmp_path):
    if not list((build_dir() / "python" / "dlfeed").glob("_dlfeed*.so")):
        pytest.skip("the _dlfeed Python extension is not built")
    out = run_script("bench/indexed_binary.py", "--quick")
    assert "dlfeed epoch" in out and "megatron epoch" in out and "sequences/s" in out, out
