# SPDX-License-Identifier: Apache-2.0
"""Emulated training in `dlfeed run` (docs/workloads.md): the compute time
per step is fixed or normal(mean, stdev) truncated at 0, deterministic per
seed, checked on the draws the summary JSON reports; AU and the report's
per-epoch figures agree with their definitions from the JSON's own numbers.
Nothing here asserts a speed: only relations that hold on any machine."""
import json
import math

import pytest


@pytest.fixture(scope="module")
def small(tmp_path_factory, dlfeed):
    d = tmp_path_factory.mktemp("train") / "h5"
    dlfeed.run("generate", "--format", "hdf5", "--dir", d, "--files", 4, "--samples-per-file", 75,
               "--shape", "8,8")
    return d


def run_json(dlfeed, tmp_path, *args, name="s.json"):
    out = tmp_path / name
    proc = dlfeed.run("run", "--summary-json", out, *args)
    return json.loads(out.read_text()), proc.stdout


def test_normal_compute_has_the_asked_mean_and_stdev_and_depends_only_on_the_seed(dlfeed, small, tmp_path):
    args = ["--batch-size", 1, "--compute-ms", 2, "--compute-stdev-ms", 0.5, "--prefetch", "depth:32", small]
    a, out = run_json(dlfeed, tmp_path, "--seed", 7, *args, name="a.json")
    c = a["run"]["compute"]
    assert c["distribution"] == "normal" and c["mean_ms"] == 2 and c["stdev_ms"] == 0.5 and c["seed"] == 7
    assert c["steps"] == 300 == a["counters"]["compute_ns"]["count"]
    # 300 draws: the sample mean is within 4 standard errors (0.5/sqrt(300)),
    # the sample standard deviation within 20%.
    assert abs(c["drawn_mean_ms"] - 2) < 4 * 0.5 / math.sqrt(300)
    assert c["drawn_stdev_ms"] == pytest.approx(0.5, rel=0.2)
    assert c["drawn_total_s"] == pytest.approx(c["drawn_mean_ms"] * 300 / 1000, rel=1e-6)
    # Each step sleeps at least its draw; the counters saw those regions.
    assert c["measured_total_s"] >= c["drawn_total_s"]
    assert a["counters"]["compute_ns"]["value"] / 1e9 >= c["drawn_total_s"]
    assert "normal(2.000 ms, 0.500 ms) truncated at 0" in out
    # Same seed, same draws; another seed, other draws.
    b, _ = run_json(dlfeed, tmp_path, "--seed", 7, *args, name="b.json")
    for k in ("drawn_mean_ms", "drawn_stdev_ms", "drawn_total_s"):
        assert b["run"]["compute"][k] == c[k]
    d, _ = run_json(dlfeed, tmp_path, "--seed", 8, *args, name="d.json")
    assert d["run"]["compute"]["drawn_total_s"] != c["drawn_total_s"]


def test_negative_draws_are_drawn_again_not_clamped(dlfeed, small, tmp_path):
    # normal(0.3, 1.2) truncated at 0 by redrawing has mean
    # mu + sigma * phi(a) / (1 - Phi(a)), a = -mu/sigma: 1.075 ms. Clamping
    # negative draws to 0 would give mu * Phi(mu/sigma) + sigma * phi(mu/sigma): 0.64 ms.
    mu, sigma = 0.3, 1.2
    a = -mu / sigma
    phi = math.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    Phi = 0.5 * (1 + math.erf(a / math.sqrt(2)))
    want = mu + sigma * phi / (1 - Phi)
    s, _ = run_json(dlfeed, tmp_path, "--batch-size", 1, "--compute-ms", mu, "--compute-stdev-ms", sigma,
                    "--epochs", 2, small)
    c = s["run"]["compute"]
    assert c["steps"] == 600
    assert want == pytest.approx(1.075, abs=0.001)
    assert c["drawn_mean_ms"] == pytest.approx(want, abs=0.12)


def test_fixed_compute_is_exact(dlfeed, small, tmp_path):
    s, _ = run_json(dlfeed, tmp_path, "--batch-size", 30, "--compute-ms", 1.5, small)
    c = s["run"]["compute"]
    assert c["distribution"] == "fixed" and c["steps"] == 10
    assert c["drawn_mean_ms"] == 1.5 and c["drawn_stdev_ms"] == 0
    assert c["measured_total_s"] >= 10 * 1.5e-3


def test_au_and_the_epoch_figures_follow_their_definitions(dlfeed, small, tmp_path):
    s, out = run_json(dlfeed, tmp_path, "--batch-size", 10, "--compute-ms", 3, "--epochs", 3, small)
    for e, mine in zip(s["epochs"], s["run"]["epochs"]):
        # DLIO's AU: compute of the steps after the first over (wall - first
        # step). The first step holds exactly one compute region, at most the
        # longest one, so AU lies between these bounds.
        longest = e["latency"]["compute_ns"]["max"] / 1e9
        span = e["wall_s"] - e["first_step_s"]
        assert 100 * (e["compute_s"] - longest) / span <= e["au_percent"] * (1 + 1e-6)
        assert e["au_percent"] <= 100 * e["compute_s"] / span * (1 + 1e-6)
        assert e["samples_per_s"] == pytest.approx(e["samples"] / e["wall_s"], rel=1e-6)
        assert mine["au_percent"] == pytest.approx(e["au_percent"], rel=1e-6)
        assert mine["io_hidden_s"] == pytest.approx(e["io_hidden_s"], abs=1e-9)
        assert mine["io_exposed_s"] == pytest.approx(e["io_exposed_s"], abs=1e-9)
        assert mine["io_mib_per_s"] == pytest.approx(e["samples_per_s"] * 8 * 8 / 2**20, rel=1e-6)
        assert mine["efficiency"] is None
    # The total's AU weighs each epoch by its wall time after the first step.
    weights = [e["wall_s"] - e["first_step_s"] for e in s["epochs"]]
    total_au = sum(e["au_percent"] * w for e, w in zip(s["epochs"], weights)) / sum(weights)
    assert s["total"]["au_percent"] == pytest.approx(total_au, rel=1e-6)
    assert s["run"]["total"]["au_percent"] == pytest.approx(total_au, rel=1e-6)
    # The per-epoch report line prints the same numbers.
    for e in s["epochs"]:
        assert f"AU {e['au_percent']:.1f}%, {e['samples_per_s']:.0f} samples/s" in out


def test_bad_compute_flags_are_errors(dlfeed, small):
    err = dlfeed.error("run", "--compute-ms", -1, small)
    assert "--compute-ms" in err
    err = dlfeed.error("run", "--compute-stdev-ms", -0.5, small)
    assert "--compute-stdev-ms" in err
