# SPDX-License-Identifier: Apache-2.0
"""Workload presets (`dlfeed run --workload`, docs/workloads.md): each preset
at a small scale writes the files, counts and shapes the scaling rule gives,
read back with numpy, h5py and TensorFlow (not with dlfeed); --scale changes
the size as documented; a complete dataset is reused, a changed one
regenerated, a foreign folder left alone; bad inputs fail with clear errors.
(deepcam and cosmoflow write their reference code's own files:
api/test_reference_workloads.py.)

The expected numbers below are worked out by hand from the rule in
docs/workloads.md (floors of 8 steps and up to 8 files; samples shrink in
their first two dimensions by sqrt(scale x published samples / samples))."""
import json
import math
import os

import h5py
import numpy as np
import pytest

# name: (scale, files, samples per file, sample shape, dtype, batch, published compute s/step, published bytes)
PRESETS = {
    "unet3d": (1e-5, 56, 1, (66, 66), "uint8", 7, 0.323, 12107 * 12107),
    "resnet50": (1e-5, 8, 400, (21, 21), "uint8", 400, 0.224, 338 * 338),
    "cosmoflow-dlio": (1e-6, 8, 1, (430, 430), "uint8", 1, 0.0035, 1681 * 1681),
    "bert": (1e-5, 8, 196, (50, 50), "uint8", 48, 0.968, 2500),
    "hep": (1e-5, 8, 64, (28, 28, 3), "float32", 64, 0.064, 224 * 224 * 3 * 4),
}


def dlio_name(i, n, ext):
    return f"img_{i:0{len(str(n))}d}_of_{n}.{ext}"


def run_workload(dlfeed, tmp_path, name, *args, scale=None, data_dir=None):
    scale = PRESETS[name][0] if scale is None else scale
    data_dir = data_dir or tmp_path / name
    out = tmp_path / f"{name}-summary.json"
    proc = dlfeed.run("run", "--workload", name, "--scale", scale, "--data-dir", data_dir,
                      "--summary-json", out, *args)
    return json.loads(out.read_text()), proc.stdout, data_dir


def read_tfrecord_images(path):
    import tensorflow as tf  # noqa: PLC0415
    images = []
    for rec in tf.data.TFRecordDataset(str(path)):
        ex = tf.train.Example.FromString(rec.numpy())
        image = ex.features.feature["image"].bytes_list.value[0]
        side = ex.features.feature["size"].int64_list.value[0]
        assert side * side == len(image)  # DLIO's size: the side of the square image
        images.append(image)
    return images


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_writes_the_documented_dataset(dlfeed, tmp_path, name):
    scale, files, per_file, shape, dtype, batch, compute_s, published_bytes = PRESETS[name]
    s, out, data_dir = run_workload(dlfeed, tmp_path, name, "--compute-ms", 0)
    train = data_dir / "train"
    sample_bytes = math.prod(shape) * np.dtype(dtype).itemsize
    ext = {"unet3d": "npz", "hep": "hdf5"}.get(name, "tfrecord")
    assert sorted(p.name for p in train.iterdir() if p.suffix == f".{ext}") == \
        sorted(dlio_name(i, files, ext) for i in range(files))
    for i in range(files):
        path = train / dlio_name(i, files, ext)
        if ext == "npz":  # DLIO: x of shape (d1, d2, n), samples on the last axis; y zeros
            with np.load(path) as z:
                assert z["x"].shape == (*shape, per_file) and z["x"].dtype == np.dtype(dtype)
                assert z["y"].shape == (per_file,) and not z["y"].any()
        elif ext == "hdf5":  # DLIO: records_0 of shape (n, ...), labels (n,)
            with h5py.File(path) as h:
                assert h["records_0"].shape == (per_file, *shape) and h["records_0"].dtype == np.dtype(dtype)
                assert h["labels"].shape == (per_file,)
        else:  # DLIO: one Example per sample, image = raw bytes, and a .idx sidecar
            images = read_tfrecord_images(path)
            assert len(images) == per_file and {len(b) for b in images} == {sample_bytes}
            idx = data_dir / "index" / "train" / f"{path.name}.idx"
            assert len(idx.read_text().splitlines()) == per_file
    # The run read all of it, with the preset's batch, a global shuffle and a cold cache.
    run = s["run"]
    assert run["workload"]["name"] == name and run["workload"]["files"] == files
    assert run["workload"]["samples_per_file"] == per_file and tuple(run["workload"]["sample_shape"]) == shape
    assert run["workload"]["sample_bytes"] == sample_bytes
    assert run["batch_size"] == batch and run["strategy"] == "global_shuffle" and run["evict"] is True
    e = s["epochs"][0]
    assert e["samples"] == files * per_file
    assert e["batches"] == -(-files * per_file // batch) >= 8
    # Compute per step scales with the sample bytes (docs/workloads.md).
    assert run["workload"]["compute_s"] == pytest.approx(compute_s * sample_bytes / published_bytes, rel=1e-9)
    assert f"workload {name} at scale" in out


def test_preset_compute_time_applies_unless_a_flag_overrides_it(dlfeed, tmp_path):
    s, _, d = run_workload(dlfeed, tmp_path, "resnet50")
    c = s["run"]["compute"]
    assert c["distribution"] == "fixed"
    assert c["mean_ms"] == pytest.approx(224 * 441 / 114244, rel=1e-9)
    assert c["steps"] == 8 and s["counters"]["compute_ns"]["count"] == 8
    # Flags given explicitly win, even when they equal a flag's own default.
    s, _, _ = run_workload(dlfeed, tmp_path, "resnet50", "--batch-size", 100, "--strategy", "sequential",
                           "--compute-ms", 0, "--evict=false", data_dir=d)
    assert s["run"]["batch_size"] == 100 and s["epochs"][0]["batches"] == 32
    assert s["run"]["strategy"] == "sequential" and s["run"]["pattern"] == "sequential"
    assert s["run"]["evict"] is False and s["run"]["compute"]["steps"] == 0


def dataset_bytes(folder):
    return sum(p.stat().st_size for p in (folder / "train").iterdir() if p.is_file() and p.suffix != ".json")


def test_scale_changes_the_size_as_documented(dlfeed, tmp_path):
    # Above the floor the sample count follows the scale and samples keep
    # their published size: bert 1e-5 -> 8 x 196, 2e-5 -> 8 x 392 of 2500 B.
    small, _, d1 = run_workload(dlfeed, tmp_path, "bert", "--compute-ms", 0, scale=1e-5, data_dir=tmp_path / "b1")
    large, _, d2 = run_workload(dlfeed, tmp_path, "bert", "--compute-ms", 0, scale=2e-5, data_dir=tmp_path / "b2")
    assert (small["run"]["workload"]["samples_per_file"], large["run"]["workload"]["samples_per_file"]) == (196, 392)
    assert small["run"]["workload"]["sample_bytes"] == large["run"]["workload"]["sample_bytes"] == 2500
    assert dataset_bytes(d2) / dataset_bytes(d1) == pytest.approx(2, rel=0.02)
    # At the floor (8 steps of 400) the count stays and samples shrink
    # instead: resnet50 1e-5 -> (21, 21), 2e-5 -> (30, 30); bytes still ~2x.
    r1, _, d3 = run_workload(dlfeed, tmp_path, "resnet50", "--compute-ms", 0, scale=1e-5, data_dir=tmp_path / "r1")
    r2, _, d4 = run_workload(dlfeed, tmp_path, "resnet50", "--compute-ms", 0, scale=2e-5, data_dir=tmp_path / "r2")
    assert r1["epochs"][0]["samples"] == r2["epochs"][0]["samples"] == 3200
    assert (r1["run"]["workload"]["sample_shape"], r2["run"]["workload"]["sample_shape"]) == ([21, 21], [30, 30])
    assert r2["run"]["workload"]["dataset_bytes"] / r1["run"]["workload"]["dataset_bytes"] == \
        pytest.approx(900 / 441)
    assert dataset_bytes(d4) > 1.8 * dataset_bytes(d3)
    # The listing shows the same numbers.
    listing = dlfeed.run("workloads", "--scale", 2e-5).stdout
    assert "392x(50, 50)" in listing and "400x(30, 30)" in listing


def mtimes(folder):
    return {p.name: p.stat().st_mtime_ns for p in sorted((folder / "train").iterdir())}


def test_rerun_reuses_a_complete_dataset_and_regenerates_a_changed_one(dlfeed, tmp_path):
    d = tmp_path / "h"
    _, out, _ = run_workload(dlfeed, tmp_path, "hep", "--compute-ms", 0, data_dir=d)
    assert "dataset: generated" in out
    before = mtimes(d)
    manifest = (d / "dlfeed-workload.json").read_text()
    assert json.loads(manifest)["files"] == 8
    _, out, _ = run_workload(dlfeed, tmp_path, "hep", "--compute-ms", 0, data_dir=d)
    assert "dataset: complete, reused" in out
    assert mtimes(d) == before
    # Other parameters in the same folder: regenerated (and the old files gone).
    s, out, _ = run_workload(dlfeed, tmp_path, "hep", "--compute-ms", 0, scale=2e-5, data_dir=d)
    assert "regenerated" in out
    with h5py.File(d / "train" / dlio_name(0, 8, "hdf5")) as h:
        assert h["records_0"].shape == (64, 40, 40, 3)
    assert (d / "dlfeed-workload.json").read_text() != manifest
    # A missing file makes it incomplete: regenerated.
    (d / "train" / dlio_name(3, 8, "hdf5")).unlink()
    _, out, _ = run_workload(dlfeed, tmp_path, "hep", "--compute-ms", 0, scale=2e-5, data_dir=d)
    assert "regenerated" in out and (d / "train" / dlio_name(3, 8, "hdf5")).exists()
    # An interrupted generation leaves its marker, not a manifest: still ours, regenerated.
    (d / "dlfeed-workload.json").rename(d / "dlfeed-workload.json.partial")
    _, out, _ = run_workload(dlfeed, tmp_path, "hep", "--compute-ms", 0, scale=2e-5, data_dir=d)
    assert "regenerated" in out and (d / "dlfeed-workload.json").exists()
    assert not (d / "dlfeed-workload.json.partial").exists()


def test_a_folder_that_is_not_a_workload_dataset_is_left_alone(dlfeed, tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    err = dlfeed.error("run", "--workload", "bert", "--scale", 1e-5, "--data-dir", d)
    assert str(d) in err and "dlfeed-workload.json" in err
    assert (d / "notes.txt").read_text() == "keep me" and sorted(os.listdir(d)) == ["notes.txt"]


def test_a_dlio_generated_folder_is_read_as_it_is(dlfeed, tmp_path):
    """A folder DLIO's generator left (no manifest): TFRecord files written by
    TensorFlow as DLIO 2.0.0 writes them, sides and counts unlike the preset's."""
    tf = pytest.importorskip("tensorflow")
    d = tmp_path / "dlio-data"
    rng = np.random.default_rng(0)
    images = []
    for i in range(3):
        (d / "train").mkdir(parents=True, exist_ok=True)
        with tf.io.TFRecordWriter(str(d / "train" / dlio_name(i, 3, "tfrecord"))) as w:
            for _ in range(8):
                img = rng.integers(0, 255, size=(30, 30), dtype=np.uint8)
                feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                           "size": tf.train.Feature(int64_list=tf.train.Int64List(value=[30]))}
                w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
                images.append(img)
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    out = tmp_path / "s.json"
    proc = dlfeed.run("run", "--workload", "resnet50", "--scale", 1e-5, "--data-dir", d, "--batch-size", 4,
                      "--compute-ms", 0, "--checksum", "--summary-json", out)
    assert "DLIO's layout" in proc.stdout and "the tfrecord files in" in proc.stdout, proc.stdout
    summary = json.loads(out.read_text())
    assert summary["epochs"][0]["samples"] == 24
    assert summary["epochs"][0]["bytes_delivered"] == 24 * 30 * 30  # (30, 30) images, not the preset's (21, 21)
    assert sorted(p.relative_to(d) for p in d.rglob("*")) == before  # nothing written or removed


@pytest.mark.parametrize("scale", ["0.0", "-1", "1.5", "nan"])
def test_bad_scale_is_a_clear_error(dlfeed, tmp_path, scale):
    if scale == "0.0":  # 0 means the preset's default: accepted
        out = dlfeed.run("workloads", "--scale", scale).stdout
        assert "0.0025" in out
        return
    err = dlfeed.error("run", "--workload", "resnet50", "--scale", scale, "--data-dir", tmp_path / "x")
    assert "scale" in err and "(0, 1]" in err
    assert not (tmp_path / "x").exists()


def test_unknown_workload_names_the_presets(dlfeed, tmp_path):
    err = dlfeed.error("run", "--workload", "gpt5", "--data-dir", tmp_path / "x")
    assert "gpt5" in err
    for name in PRESETS:
        assert name in err
    err = dlfeed.error("run", "--workload", "bert", tmp_path)
    assert "either --workload or dataset paths" in err
    err = dlfeed.error("run", "--scale", "abc", "--workload", "bert")
    assert "scale" in err
