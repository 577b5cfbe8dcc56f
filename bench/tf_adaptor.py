#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""dlfeed.tf.dataset against the loader it wraps and against tf.data, warm cache.

    .venv/bin/python bench/tf_adaptor.py                 # 5 alternating rounds + the breakdown
    .venv/bin/python bench/tf_adaptor.py --quick         # tiny data, one round (seconds)
    .venv/bin/python bench/tf_adaptor.py --breakdown-only

The dataset is the TFRecord scenario of bench/compare/compare.py (DLIO layout,
32 KiB `image` bytes + `size` int64 per Example, buffered_shuffle with a
10,000-sample buffer for dlfeed, shuffle(10000) for tf.data), generated once
under --data and read once before the rounds so that every run is warm.

Rounds: each system of bench/compare/runners.py (`dlfeed_py`: dlfeed.Loader,
`dlfeed_tf`: dlfeed.tf.dataset, `tf_data`: TFRecordDataset pipeline) runs in
its own process with the runners' protocol (warm-up batches, settle, one
timed epoch to its last batch, every sample touched in place, without a
copy); the running order rotates from round to round; medians of samples/s,
of the process's CPU per sample (all its threads) and of peak RSS.

Breakdown (one process, several epochs each, medians): where a batch's time
goes: the loader alone; TensorFlow's own per-element floor (a
`from_tensors(...).repeat(N)` of the same shapes iterated from Python, no
loader); dlfeed.tf.dataset; and how long destroying a finished tf.data
iterator takes (TensorFlow waits for its autotune thread).

model.fit (one process): a tiny Keras model trained over dlfeed.tf.dataset
and over tf.data's pipeline, alternating rounds; samples/s per epoch.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import sys
import time
from typing import Dict, List

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _benchlib as bl  # noqa: E402

RUNNERS = HERE / "compare" / "runners.py"
SYSTEMS = {"dlfeed_py": "dlfeed.Loader", "dlfeed_tf": "dlfeed.tf.dataset", "tf_data": "tf.data (TFRecordDataset)"}


def tfrecord_scenario():
    """The TFRecord scenario of bench/compare/compare.py (one definition of the dataset)."""
    sys.path.insert(0, str(HERE / "compare"))
    import compare

    return next(s for s in compare.SCENARIOS if s.key == "tfrecord")


def run_system(system: str, path: pathlib.Path, sc, a) -> Dict:
    cmd = [sys.executable, RUNNERS, system, "--data", path, "--batch-size", a.batch_size,
           "--strategy", sc.strategy, "--buffer-size", sc.params.get("buffer_size", 10000),
           "--fields", ",".join(sc.fields), "--warmup-batches", 4, "--settle-s", 1.0]
    env = dict(os.environ, PYTHONPATH=bl.PYTHONPATH, TF_CPP_MIN_LOG_LEVEL="2")
    out, peak = bl.run_measured(cmd, env=env)
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_kib"] = peak
    r["samples_s"] = r["samples"] / r["seconds"]
    r["cpu_us_per_sample"] = r["cpu_s"] / r["samples"] * 1e6
    return r


# ---------------------------------------------------------------- breakdown

def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def breakdown(path: pathlib.Path, sc, a) -> Dict[str, Dict[str, float]]:
    """Per batch, wall and CPU (this process, all threads) microseconds, medians over epochs."""
    import numpy as np
    import tensorflow as tf

    import runners

    sys.path[:0] = bl.PYTHONPATH.split(":")  # the package as scripts/setup.sh builds it
    import dlfeed
    import dlfeed.tf

    kw = dict(fields=sc.fields, batch_size=a.batch_size, strategy=sc.strategy, seed=runners.SEED,
              **sc.params)
    loader = dlfeed.Loader(path, **kw)
    n = loader.batches_per_epoch

    def consume(fields) -> int:
        return sum(runners.touch(runners.as_numpy(f)) for f in fields)

    def from_loader():
        for b in loader:
            yield [b[k] for k in range(len(loader.field_names))]

    # The same element shapes as a batch, from TensorFlow itself: its per-element floor.
    first = next(iter(loader))
    const = tuple(tf.constant(first[k]) for k in range(len(loader.field_names)))
    del first
    floor_ds = tf.data.Dataset.from_tensors(const).repeat(n)
    tf_ds = dlfeed.tf.dataset(path, loader=dlfeed.Loader(path, **kw))

    def over(ds):
        keep = []

        def gen():
            it = iter(ds)
            keep.append(it)
            for el in it:
                yield el
        return gen, keep

    cases = {"loader": (from_loader, None), "tf_floor": over(floor_ds), "dlfeed_tf": over(tf_ds)}
    for name, (gen, _) in cases.items():  # one untimed epoch each (threads, tracing)
        for fields in gen():
            consume(fields)
    times: Dict[str, Dict[str, List[float]]] = {k: {"wall": [], "cpu": [], "teardown": []} for k in cases}
    for _ in range(a.epochs):
        for name, (gen, keep) in cases.items():
            c0, t0 = cpu_s(), time.perf_counter()
            batches = 0
            for fields in gen():
                consume(fields)
                batches += 1
            wall, cpu = time.perf_counter() - t0, cpu_s() - c0
            times[name]["wall"].append(wall / batches * 1e6)
            times[name]["cpu"].append(cpu / batches * 1e6)
            if keep is not None:
                t1 = time.perf_counter()
                keep.clear()
                times[name]["teardown"].append((time.perf_counter() - t1) * 1e3)
    return {k: {m: bl.median(v) for m, v in d.items()} for k, d in times.items()}


# ---------------------------------------------------------------- model.fit

def fit(path: pathlib.Path, sc, a) -> Dict[str, List[float]]:
    """Keras model.fit over dlfeed.tf.dataset and over tf.data's pipeline, alternating
    (one model each, compiled once): samples/s of every epoch (a Keras callback times
    each epoch; Keras destroys the epoch's iterator inside it). The model is tiny (a
    strided cast and one Dense unit), so the input pipeline and Keras's per-step
    work dominate."""
    import warnings

    import tensorflow as tf

    import runners

    sys.path[:0] = bl.PYTHONPATH.split(":")
    import dlfeed
    import dlfeed.tf

    # tf.data's pipeline has no known length: Keras warns when its first epoch ends.
    warnings.filterwarnings("ignore", message="Your input ran out of data")
    kw = dict(fields=sc.fields, batch_size=a.batch_size, strategy=sc.strategy, seed=runners.SEED, **sc.params)
    loader = dlfeed.Loader(path, **kw)
    samples = loader.samples_per_epoch
    ns = argparse.Namespace(data=str(path), fields=sc.fields, batch_size=a.batch_size,
                            buffer_size=sc.params.get("buffer_size", 10000))

    def target(x, size):
        return x, tf.cast(tf.reshape(size, [-1]) % 2, tf.float32)

    datasets = {"dlfeed_tf": dlfeed.tf.dataset(path, loader=loader).map(target),
                "tf_data": runners.tf_data_pipeline(ns).map(target)}
    width = next(iter(dlfeed.Loader(path, **kw)))[0].shape[1]  # bytes per image (the specs leave it open)

    class EpochTimes(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: List[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.t0)

    models = {}
    for name in datasets:
        inp = tf.keras.Input((width,), dtype=tf.uint8)
        x = tf.keras.layers.Lambda(lambda t: tf.cast(t[:, ::64], tf.float32) / 255.0)(inp)
        models[name] = tf.keras.Model(inp, tf.keras.layers.Dense(1)(x))
        models[name].compile(optimizer="sgd", loss="mse")
        models[name].fit(datasets[name], epochs=1, verbose=0, shuffle=False)  # trace, warm up
    out: Dict[str, List[float]] = {k: [] for k in datasets}
    for rnd in range(a.fit_rounds):
        for name in bl.rotated(list(datasets), rnd):
            cb = EpochTimes()
            models[name].fit(datasets[name], epochs=2, verbose=0, shuffle=False, callbacks=[cb])
            out[name] += [samples / t for t in cb.seconds]
    return out


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(bl.ROOT / "data" / "tf_adaptor"), help="where the dataset is generated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=7, help="breakdown: timed epochs per case")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="runners.py systems to alternate")
    ap.add_argument("--quick", action="store_true", help="tiny dataset, one round, three breakdown epochs")
    ap.add_argument("--fit-rounds", type=int, default=3, help="model.fit: alternating rounds of 2 epochs each")
    ap.add_argument("--breakdown-only", action="store_true", help="no runner rounds (breakdown and model.fit)")
    ap.add_argument("--json", help="write all numbers here")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.epochs, a.fit_rounds = 1, 3, 1
    bl.require(bl.DLFEED, targets="dlfeed_cli _dlfeed")
    sc = tfrecord_scenario()
    root = pathlib.Path(a.data) / ("quick" if a.quick else "full")
    if bl.generate(root, sc.quick_gen if a.quick else sc.gen):
        print(f"generated {root}", flush=True)
    path = root / sc.sub
    bl.warm([path])
    m = bl.machine()
    print(f"{bl.machine_line(m)}, commit {bl.git_commit()}", flush=True)

    results: Dict = {"machine": m, "commit": bl.git_commit(), "gen": " ".join(map(str, sc.quick_gen if a.quick
                                                                                      else sc.gen)),
                     "runs": {}, "breakdown": {}}
    systems = [] if a.breakdown_only else [s for s in a.systems.split(",") if s]
    for rnd in range(a.rounds if systems else 0):
        bl.warm([path])
        for s in bl.rotated(systems, rnd):
            r = run_system(s, path, sc, a)
            results["runs"].setdefault(s, []).append(r)
            print(f"[round {rnd + 1}/{a.rounds}] {SYSTEMS.get(s, s)}: {r['samples_s']:,.0f} samples/s, "
                  f"{r['cpu_us_per_sample']:.1f} CPU us/sample, peak RSS {r['peak_rss_kib'] / 1024:,.0f} MiB, "
                  f"tf teardown {r['tf_teardown_s'] * 1e3:.0f} ms, load {os.getloadavg()[0]:.1f}", flush=True)
    touches = {r["touch"] for runs in results["runs"].values() for r in runs}
    if len(touches) > 1:
        print(f"ERROR: systems delivered different bytes: {touches}")
        return 1

    if results["runs"]:
        print("\n| system | samples/s (median) | rounds | CPU us/sample | peak RSS MiB |")
        print("|---|---|---|---|---|")
        for s, runs in results["runs"].items():
            sps = [r["samples_s"] for r in runs]
            print(f"| {SYSTEMS.get(s, s)} | {bl.median(sps):,.0f} | {' '.join(f'{x:,.0f}' for x in sps)} | "
                  f"{bl.median([r['cpu_us_per_sample'] for r in runs]):.1f} | "
                  f"{bl.median([r['peak_rss_kib'] for r in runs]) / 1024:,.0f} |")
        if "tf_data" in results["runs"] and "dlfeed_tf" in results["runs"]:
            ratio = (bl.median([r["samples_s"] for r in results["runs"]["dlfeed_tf"]]) /
                     bl.median([r["samples_s"] for r in results["runs"]["tf_data"]]))
            print(f"\ndlfeed.tf.dataset / tf.data: {ratio:.2f}x")

    results["breakdown"] = breakdown(path, sc, a)
    print("\n| per batch (median of epochs) | wall us | CPU us | iterator teardown ms |")
    print("|---|---|---|---|")
    labels = {"loader": "dlfeed.Loader alone", "tf_floor": "TensorFlow floor (from_tensors.repeat, no loader)",
              "dlfeed_tf": "dlfeed.tf.dataset"}
    for k, v in results["breakdown"].items():
        td = "–" if v["teardown"] != v["teardown"] else f"{v['teardown']:.0f}"
        print(f"| {labels[k]} | {v['wall']:,.0f} | {v['cpu']:,.0f} | {td} |")
    results["fit"] = fit(path, sc, a)
    print("\n| Keras model.fit (tiny model) | samples/s (median of epochs) | epochs |")
    print("|---|---|---|")
    for k, v in results["fit"].items():
        print(f"| {SYSTEMS[k]} | {bl.median(v):,.0f} | {' '.join(f'{x:,.0f}' for x in v)} |")
    results["machine"]["load_end"] = f"{os.getloadavg()[0]:.1f}"
    print(f"\n1-minute load {m['load']} at the start, {results['machine']['load_end']} at the end")
    if a.json:
        bl.dump_json(pathlib.Path(a.json), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
