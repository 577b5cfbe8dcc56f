# SPDX-License-Identifier: Apache-2.0
"""`dlfeed dlio CONFIG.yaml [overrides]`: DLIO's own shipped workload configs
(dlio-benchmark 2.0.0 from PyPI, fetched at test time) run at a tiny scale
through generate, train, evaluation and checkpoint; summary.json reads like
DLIO's (its keys and units); every key is honoured or reported ignored; YAML
and override errors name the file and line."""
import json
import math
import pathlib
import re
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import ROOT

CACHE = ROOT / "build" / "test-cache" / "dlio-benchmark-2.0.0"

# The keys DLIO 2.0.0's StatsCounter writes to summary.json (utils/statscounter.py).
SUMMARY_KEYS = {"start", "num_accelerators", "num_hosts", "hostname", "metric", "num_files_train", "num_files_eval",
                "num_samples_per_file", "host_cpu_count", "host_processor_name", "potential_caching", "host_cpuinfo",
                "host_meminfo", "host_memory_GB", "data_size_per_host_GB", "epochs", "end"}
TRAIN_METRIC = {"train_au_percentage", "train_au_mean_percentage", "train_au_meet_expectation",
                "train_au_stdev_percentage", "train_throughput_samples_per_second",
                "train_throughput_mean_samples_per_second", "train_throughput_stdev_samples_per_second",
                "train_io_mean_MB_per_second", "train_io_stdev_MB_per_second"}
EVAL_METRIC = {k.replace("train_", "eval_") for k in TRAIN_METRIC}


@pytest.fixture(scope="session")
def workloads():
    """dlio_benchmark/configs/workload of the PyPI wheel, downloaded once into build/test-cache."""
    folder = CACHE / "dlio_benchmark" / "configs" / "workload"
    if not (folder / "unet3d_h100.yaml").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "dlio-benchmark==2.0.0",
                               "-d", str(CACHE)], capture_output=True, text=True, timeout=120)
        wheels = list(CACHE.glob("dlio_benchmark-2.0.0-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip(f"PyPI unreachable: pip download dlio-benchmark==2.0.0 failed:\n{proc.stderr[-500:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                if name.startswith("dlio_benchmark/configs/"):
                    z.extract(name, CACHE)
    return folder


def dlio(dlfeed, config, tmp_path, *overrides, check=True, folders=True):
    """Runs `dlfeed dlio` with data, checkpoints and output under tmp_path."""
    args = ["dlio", config]
    if folders:
        args += [f"++workload.dataset.data_folder={tmp_path}/data", f"++workload.checkpoint.checkpoint_folder={tmp_path}/ckpt",
                 f"++workload.output.folder={tmp_path}/out"]
    return dlfeed.run(*args, *overrides, check=check)


def summary_of(tmp_path):
    return json.loads((tmp_path / "out" / "summary.json").read_text())


def check_summary(s, *, epochs, record_length, au, files_train, files_eval=0, spf, evaluation=False):
    assert SUMMARY_KEYS | {"dlfeed"} == set(s), set(s) ^ (SUMMARY_KEYS | {"dlfeed"})
    m = s["metric"]
    assert set(m) == TRAIN_METRIC | (EVAL_METRIC if evaluation else set()), set(m)
    assert s["epochs"] == epochs and len(m["train_au_percentage"]) == epochs
    assert s["num_files_train"] == files_train and s["num_files_eval"] == files_eval
    assert s["num_samples_per_file"] == spf and s["num_accelerators"] == 1 and s["num_hosts"] == 1
    tp = m["train_throughput_samples_per_second"]
    assert len(tp) == epochs and all(x > 0 for x in tp)
    assert m["train_throughput_mean_samples_per_second"] == pytest.approx(np.mean(tp))
    assert m["train_throughput_stdev_samples_per_second"] == pytest.approx(np.std(tp))
    # DLIO's MB/s: samples/s x the configured record_length, in MiB.
    assert m["train_io_mean_MB_per_second"] == pytest.approx(np.mean(tp) * record_length / 1024 / 1024)
    aus = m["train_au_percentage"]
    assert all(0 <= a <= 100 for a in aus) and m["train_au_mean_percentage"] == pytest.approx(np.mean(aus))
    assert m["train_au_meet_expectation"] == ("success" if np.mean(aus) >= au * 100 else "fail")
    assert isinstance(s["host_cpu_count"], list) and isinstance(s["potential_caching"], list)
    assert isinstance(s["host_meminfo"], dict) and "MemTotal" in s["host_meminfo"]
    assert s["data_size_per_host_GB"] == pytest.approx(spf * files_train * record_length / 2**30)
    if evaluation:
        assert len(m["eval_au_percentage"]) >= 1 and all(x > 0 for x in m["eval_throughput_samples_per_second"])
    return m


def test_unet3d_npz_with_record_length_stdev_and_epoch_checkpoints(dlfeed, workloads, tmp_path):
    proc = dlio(dlfeed, workloads / "unet3d_h100.yaml", tmp_path, "++workload.workflow.generate_data=True",
                "workload.dataset.num_files_train=8", "workload.dataset.record_length=4096",
                "workload.dataset.record_length_stdev=2048", "workload.reader.batch_size=3",
                "workload.train.epochs=3", "workload.train.computation_time=0.002",
                "workload.checkpoint.checkpoint_after_epoch=2", "workload.checkpoint.model_size=5000",
                "++workload.checkpoint.layer_parameters=[100, 23]")
    out = proc.stdout
    assert "ignored: workload.reader.read_threads (" in out
    assert "ignored: workload.dataset.record_length_resize (" in out
    assert "order: global_shuffle seed 123" in out
    # DLIO's names and layout, readable by numpy: x is (d1, d2, samples), y zeros; the sides vary (stdev).
    files = sorted((tmp_path / "data" / "train").iterdir())
    assert [f.name for f in files] == [f"img_{i}_of_8.npz" for i in range(8)]
    shapes = set()
    for f in files:
        with np.load(f) as z:
            assert z["x"].dtype == np.uint8 and z["x"].shape[2] == 1 and z["y"].tolist() == [0]
            shapes.add(z["x"].shape)
    assert len(shapes) > 1, shapes
    s = summary_of(tmp_path)
    check_summary(s, epochs=3, record_length=4096, au=0.90, files_train=8, spf=1)
    # 8 samples in batches of 3: 2 steps, the partial batch dropped as DLIO drops it.
    assert s["dlfeed"]["steps_per_epoch"] == 2 and [e["steps"] for e in s["dlfeed"]["epochs"]] == [2, 2, 2]
    assert s["dlfeed"]["train_counters"]["epochs"][0]["samples"] == 6
    # Checkpoints after epoch 2, every 2 epochs: the model file and one layer file (sum of the parameters).
    ckpt = {f.name: f.stat().st_size for f in (tmp_path / "ckpt").iterdir()}
    assert ckpt == {"model-2-2-0.pt": 5000, "layer-0-2-2-0.pt": 123}
    assert [e["checkpoints"] for e in s["dlfeed"]["epochs"]] == [0, 1, 0]
    assert s["dlfeed"]["checkpoint_bytes"] == 5123
    stats = json.loads((tmp_path / "out" / "per_epoch_stats.json").read_text())
    assert set(stats) == {"1", "2", "3"} and "ckpt1" in stats["2"] and "block1" in stats["1"]
    assert float(stats["1"]["duration"]) >= 0


def test_an_epoch_s_duration_is_its_end_less_its_start_with_evict(dlfeed, workloads, tmp_path):
    # As DLIO writes it: the epoch's start was stamped before --evict dropped the files' pages, its time after.
    import datetime
    dlio(dlfeed, workloads / "unet3d_h100.yaml", tmp_path, "++workload.workflow.generate_data=True",
         "workload.dataset.num_files_train=8", "workload.dataset.record_length=65536",
         "workload.dataset.record_length_stdev=0", "workload.reader.batch_size=2",
         "workload.train.epochs=2", "workload.train.computation_time=0.001", "++workload.workflow.checkpoint=False",
         "--evict")
    stats = json.loads((tmp_path / "out" / "per_epoch_stats.json").read_text())
    for e in ("1", "2"):
        took = (datetime.datetime.fromisoformat(stats[e]["end"])
                - datetime.datetime.fromisoformat(stats[e]["start"])).total_seconds()
        assert abs(took - float(stats[e]["duration"])) <= 0.006, (e, stats[e])


def read_tfrecord(path):
    """(offset, payload) of each record: the framing read by hand."""
    data, out, off = path.read_bytes(), [], 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        out.append((off, data[off + 12:off + 12 + n]))
        off += 12 + n + 4
    return out


@pytest.mark.parametrize("name,spf,batch", [("resnet50_h100", 40, 16), ("cosmoflow_h100", 1, 1), ("bert_v100", 64, 48)])
def test_tfrecord_workloads(dlfeed, workloads, tmp_path, name, spf, batch):
    files = 4
    proc = dlio(dlfeed, workloads / f"{name}.yaml", tmp_path, "++workload.workflow.generate_data=True",
                f"workload.dataset.num_files_train={files}", f"workload.dataset.num_samples_per_file={spf}",
                "workload.dataset.record_length=1024", f"workload.reader.batch_size={batch}",
                "++workload.train.epochs=2", "workload.train.computation_time=0.001",
                *(["workload.train.total_training_steps=3", "workload.checkpoint.steps_between_checkpoints=2",
                   "workload.checkpoint.model_size=1000", "++workload.checkpoint.layer_parameters=[10]"]
                  if name == "bert_v100" else []))
    out = proc.stdout
    assert "ignored: workload.reader.read_threads (" in out
    prefix = "part" if name == "bert_v100" else "img"
    train = sorted((tmp_path / "data" / "train").iterdir())
    assert [f.name for f in train] == [f"{prefix}_{i}_of_{files}.tfrecord" for i in range(files)]
    # DALI/DLIO index files: "offset length" per record, length the whole framed record.
    for f in train:
        idx = (tmp_path / "data" / "index" / "train" / (f.name + ".idx")).read_text().split("\n")
        recs = read_tfrecord(f)
        assert len(recs) == spf
        assert [tuple(map(int, l.split())) for l in idx if l] == [(o, len(p) + 16) for o, p in recs]
    s = summary_of(tmp_path)
    m = check_summary(s, epochs=2, record_length=1024, au=0.7 if name.startswith("cosmo") else 0.9,
                      files_train=files, spf=spf)
    steps = 3 if name == "bert_v100" else files * spf // batch
    assert s["dlfeed"]["steps_per_epoch"] == steps
    assert [e["steps"] for e in s["dlfeed"]["epochs"]] == [steps, steps]
    if name == "bert_v100":
        # total_training_steps caps each epoch (DLIO 2.0.0 counts per epoch); a checkpoint every 2 steps.
        assert "ignored: workload.workflow.debug (" in out
        assert sorted(f.name for f in (tmp_path / "ckpt").iterdir()) == [
            "layer-0-1-2-0.pb", "layer-0-2-2-0.pb", "model-1-2-0.pb", "model-2-2-0.pb"]
        stats = json.loads((tmp_path / "out" / "per_epoch_stats.json").read_text())
        assert {"block1", "block2", "ckpt1"} <= set(stats["1"])
        # The counters end the cut epoch's last step too (they counted one step less: no next() after it).
        assert [(e["steps"], e["complete"]) for e in s["dlfeed"]["train_counters"]["epochs"]] == [(steps, False)] * 2
    if name == "resnet50_h100":
        # The iterative sampler without shuffles: file order.
        assert "order: sequential" in out


def test_evaluation_reads_valid_and_training_reads_train_only(dlfeed, workloads, tmp_path):
    # DLIO's default.yaml: npz in round-robin subfolders, with evaluation; here as hdf5.
    common = ("workload.dataset.num_files_train=6", "workload.dataset.num_files_eval=3",
              "workload.dataset.record_length=256", "workload.reader.batch_size=2", "workload.train.epochs=2",
              "workload.train.computation_time=0.001", "workload.evaluation.eval_time=0.001",
              "workload.dataset.format=hdf5")
    proc = dlio(dlfeed, workloads / "default.yaml", tmp_path, "++workload.workflow.generate_data=True", *common)
    assert "evaluating on 3 of" in proc.stdout
    train = sorted(p.relative_to(tmp_path / "data") for p in (tmp_path / "data" / "train").rglob("*.hdf5"))
    assert [str(p) for p in train] == ["train/0/img_0_of_6.hdf5", "train/0/img_2_of_6.hdf5", "train/0/img_4_of_6.hdf5",
                                       "train/1/img_1_of_6.hdf5", "train/1/img_3_of_6.hdf5", "train/1/img_5_of_6.hdf5"]
    assert len(list((tmp_path / "data" / "valid").rglob("*.hdf5"))) == 3
    import h5py
    with h5py.File(tmp_path / "data" / "train" / "0" / "img_0_of_6.hdf5") as f:
        assert f["records"].shape == (1, 16, 16) and f["labels"][:].tolist() == [0]
    s = summary_of(tmp_path)
    check_summary(s, epochs=2, record_length=256, au=0.9, files_train=6, files_eval=3, spf=1, evaluation=True)
    # Training read 6 of the 9 files' samples (3 steps of 2), evaluation 3 (steps of batch_size_eval 1).
    assert s["dlfeed"]["train_counters"]["epochs"][0]["samples"] == 6
    assert s["dlfeed"]["eval_counters"]["epochs"][0]["samples"] == 3
    assert all(e["eval_s"] is not None for e in s["dlfeed"]["epochs"])
    # Every epoch read whole is complete, with its every step (they were cut short by one, never ended).
    for counters in (s["dlfeed"]["train_counters"], s["dlfeed"]["eval_counters"]):
        assert all(e["complete"] for e in counters["epochs"]), counters["epochs"]
    assert [e["steps"] for e in s["dlfeed"]["train_counters"]["epochs"]] == [3, 3]
    # Without evaluation the same folder trains on train/ only, and says valid/ is not read.
    proc = dlio(dlfeed, workloads / "default.yaml", tmp_path, *common, "workload.workflow.evaluation=False")
    assert "valid/ is not read" in proc.stdout
    s = summary_of(tmp_path)
    # num_files_eval: the configured value, as DLIO writes it whether it evaluates or not.
    assert s["num_files_eval"] == 3 and "eval_au_percentage" not in s["metric"]
    assert s["dlfeed"]["train_counters"]["total"]["samples"] == 12  # 2 epochs x 6, nothing of valid/


def test_missing_data_says_how_to_generate(dlfeed, workloads, tmp_path):
    err = dlfeed.error("dlio", workloads / "unet3d_h100.yaml", f"++workload.dataset.data_folder={tmp_path}/none",
                       f"++workload.output.folder={tmp_path}/out")
    assert f"{tmp_path}/none/train: 0 .npz files" in err and "generate_data=True" in err


@pytest.mark.parametrize("spf", [5, 1])
def test_files_holding_other_than_num_samples_per_file_are_an_error(dlfeed, workloads, tmp_path, spf):
    # Data generated with 3 samples per file, read with a YAML that says spf: the steps, the bytes and
    # which samples DLIO reads all follow from it, so neither more nor fewer is run as if it were.
    cfg = workloads / "resnet50_h100.yaml"
    dlio(dlfeed, cfg, tmp_path, "++workload.workflow.generate_data=True", "++workload.workflow.train=False",
         "workload.dataset.num_files_train=4", "workload.dataset.num_samples_per_file=3",
         "workload.dataset.record_length=256", "workload.reader.batch_size=2")
    proc = dlio(dlfeed, cfg, tmp_path, "++workload.workflow.generate_data=False", "workload.dataset.num_files_train=4",
                f"workload.dataset.num_samples_per_file={spf}", "workload.dataset.record_length=256",
                "workload.reader.batch_size=2", check=False)
    assert proc.returncode != 0
    assert (f"{tmp_path}/data/train: {tmp_path}/data/train/img_0_of_4.tfrecord holds 3 samples, where "
            f"workload.dataset.num_samples_per_file says {spf} (4 files)") in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_overrides_follow_hydras_rules(dlfeed, workloads, tmp_path):
    cfg = workloads / "resnet50_h100.yaml"
    out = dlfeed.run("dlio", cfg, "--dry-run", "workload.reader.batch_size=4", "++workload.train.epochs=7",
                     "+workload.train.seed=9", "~workload.train.computation_time", "++workload.reader.nosuch=1").stdout
    assert "honoured: workload.reader.batch_size = 4 (" in out and "honoured: workload.train.epochs = 7 (" in out
    assert "order: sequential seed 9" in out and "computation_time" not in out
    assert "ignored: workload.reader.nosuch (not a DLIO 2.0.0 setting" in out
    assert "ignored: workload.reader.computation_threads (" in out
    for args, msg in ((["workload.reader.nosuch=1"], "is not in the config; add it with +workload.reader.nosuch=1"),
                      (["+workload.reader.batch_size=4"], "is already in the config"),
                      (["reader.batch_size=4"], "write workload.reader.batch_size"),
                      (["workload.reader.batch_size=four"],
                       "override 'workload.reader.batch_size=four': workload.reader.batch_size: expected an integer, found 'four'"),
                      (["++workload.reader.sample_shuffle=sometimes"], "expected one of off, seed, random"),
                      (["++workload.dataset.format=jpeg"], "expected one of npz, npy, hdf5, tfrecord"),
                      (["workload.train.epochs=[1, 2"], "expected ',' or ']'")):
        err = dlfeed.error("dlio", cfg, "--dry-run", *args)
        assert msg in err, (args, err)


def write(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_yaml_subset(dlfeed, tmp_path):
    cfg = write(tmp_path, """---
# a comment line
model: "my model"   # a trailing comment
framework: 'pytorch'
dataset:
   format: npz
   num_files_train: 1_024
   data_folder: "data/with # hash"
reader:
   data_loader: pytorch
   batch_size: 4
checkpoint:
   optimization_groups: [1, 2, 3]
   layer_parameters:
   - 5
   - 6
metric: {au: 0.5}
""")
    out = dlfeed.run("dlio", cfg, "--dry-run").stdout
    assert "honoured: workload.model = 'my model' (" in out
    assert "honoured: workload.dataset.num_files_train = 1_024 (" in out
    assert "honoured: workload.dataset.data_folder = 'data/with # hash' (" in out
    assert "honoured: workload.checkpoint.optimization_groups = [1, 2, 3] (" in out
    assert "honoured: workload.checkpoint.layer_parameters = [5, 6] (" in out
    assert "honoured: workload.metric.au = 0.5 (" in out


@pytest.mark.parametrize("text,line,msg", [
    ("model: a\nreader:\n\tbatch_size: 4\n", 3, "a tab in the indentation"),
    ("model: a\nreader:\n  batch_size: 4\n    read_threads: 2\n", 4, "unexpected indentation"),
    ("model: a\nreader\n", 2, "expected 'key: value', found 'reader'"),
    ("model: a\nmodel: b\n", 2, "duplicate key 'model'"),
    ("model: \"open\n", 1, "not closed"),
    ("model: &x a\n", 1, "anchors and aliases are not supported"),
    ("model: |\n  text\n", 1, "block scalars"),
    ("model: a\n---\nmodel: b\n", 2, "a second document"),
    ("model: a\nreader:\n  batch_size: x\n", 3, "workload.reader.batch_size: expected an integer, found 'x'"),
    ("model: a\ntrain:\n  epochs: [1, 2]\n", 3, "workload.train.epochs: expected an integer, found the sequence [1, 2]"),
    ("model: a\nworkflow:\n  train: maybe\n", 3, "expected True or False"),
    ("model: a\nreader: 4\n", 2, "workload.reader: expected a section"),
    ("- a\n- b\n", 1, "must be a mapping"),
    ("model: a\nreader:\n  batch_size: 010\n", 3,
     "workload.reader.batch_size: 010 has a leading zero, which YAML 1.1 (DLIO's reader) takes as an octal number"),
    ("model: a\nreader:\n  batch_size: 09\n", 3, "09 has a leading zero, which YAML 1.1 (DLIO's reader) takes as a "
                                                  "string"),
    ("model: a\ntrain:\n  computation_time: 010\n", 3, "workload.train.computation_time: 010 has a leading zero"),
    ("model: a\ncheckpoint:\n  layer_parameters: [010, 20]\n", 3,
     "workload.checkpoint.layer_parameters: 010 has a leading zero"),
])
def test_yaml_errors_name_file_and_line(dlfeed, tmp_path, text, line, msg):
    cfg = write(tmp_path, text, "bad.yaml")
    err = dlfeed.error("dlio", cfg, "--dry-run")
    assert f"{cfg}:{line}: " in err and msg in err, err


def test_a_byte_order_mark_starts_the_file_not_its_first_key(dlfeed, tmp_path):
    """A YAML file saved with a UTF-8 byte order mark (Windows editors) reads as YAML's readers (DLIO's) read
    it: its first key is the key, not a key with the mark in it that was passed over as an unknown setting
    (here the whole dataset section, and the run went on with defaults)."""
    cfg = tmp_path / "bom.yaml"
    cfg.write_bytes("\ufeffdataset:\n  format: hdf5\n  num_files_train: 2\nmodel: m\n".encode())
    out = dlfeed.run("dlio", cfg, "--dry-run").stdout
    assert "honoured: workload.dataset.format = hdf5 (" in out, out
    assert "ignored" not in out, out


def test_usage_errors(dlfeed, workloads, tmp_path):
    assert "give a DLIO workload config first" in dlfeed.error("dlio", "++workload.train.epochs=1")
    assert "one config only" in dlfeed.error("dlio", workloads / "bert_v100.yaml", workloads / "default.yaml")
    err = dlfeed.error("dlio", tmp_path / "nope.yaml")
    assert "nope.yaml" in err
    # More steps than the data holds: DLIO refuses, so does dlfeed.
    err = dlio(dlfeed, workloads / "bert_v100.yaml", tmp_path, "++workload.workflow.generate_data=True",
               "workload.dataset.num_files_train=1", "workload.dataset.num_samples_per_file=48", check=False).stderr
    assert "only enough data for 1 steps but 1000 wanted" in err


def read_dlio_indexed(path):
    """The samples of a DLIO indexed binary file, read as DLIO's IndexedBinaryReader
    reads them: offsets and sizes (int64) from NAME.off.idx and NAME.sz.idx."""
    data = path.read_bytes()
    offsets = np.fromfile(f"{path}.off.idx", dtype=np.int64)
    sizes = np.fromfile(f"{path}.sz.idx", dtype=np.int64)
    return [data[o:o + s] for o, s in zip(offsets, sizes)]


@pytest.mark.parametrize("name,ext", [("dlrm", "indexed_binary"), ("megatron_deepspeed", "mmap_indexed_binary")])
def test_indexed_binary_workloads(dlfeed, workloads, tmp_path, name, ext):
    """DLIO's last two shipped workloads: dlrm (indexed_binary) and megatron_deepspeed
    (mmap_indexed_binary), generated in DLIO's layout, trained, checkpointed."""
    small = ["workload.dataset.num_files_train=2", "workload.dataset.num_samples_per_file=20",
             "workload.dataset.record_length=256", "workload.reader.batch_size=4", "workload.train.epochs=2",
             "workload.train.computation_time=0.001"]
    if name == "dlrm":
        # dlrm's total_training_steps (32768) is more than 2 x 20 samples give: refused before any file is written.
        err = dlio(dlfeed, workloads / "dlrm.yaml", tmp_path, "++workload.workflow.generate_data=True", *small,
                   check=False).stderr
        assert "only enough data for 10 steps but 32768 wanted" in err, err
        assert not (tmp_path / "data").exists()
        extra = ["workload.train.total_training_steps=6", "++workload.workflow.checkpoint=True",
                 "++workload.checkpoint.checkpoint_after_epoch=1", "++workload.checkpoint.model_size=100",
                 "++workload.checkpoint.layer_parameters=[5]"]
    else:
        extra = ["workload.checkpoint.steps_between_checkpoints=4", "workload.checkpoint.model_size=100",
                 "workload.checkpoint.optimization_groups=[10, 20]", "workload.checkpoint.num_layers=2",
                 "workload.checkpoint.layer_parameters=[3, 4]"]
    dlio(dlfeed, workloads / f"{name}.yaml", tmp_path, "++workload.workflow.generate_data=True", *small, *extra)
    files = sorted(p.name for p in (tmp_path / "data" / "train").iterdir())
    assert files == [f"img_{i}_of_2.{ext}{s}" for i in range(2) for s in ("", ".off.idx", ".sz.idx")]
    samples = read_dlio_indexed(tmp_path / "data" / "train" / f"img_1_of_2.{ext}")
    assert len(samples) == 20 and {len(s) for s in samples} == {256}
    # dlfeed reads what DLIO's reader reads, byte for byte.
    lib = pytest.importorskip("dlfeed")  # the Python package (the fixture `dlfeed` is the command line)
    loader = lib.Loader(tmp_path / "data" / "train" / f"img_1_of_2.{ext}", batch_size=20)
    batch = next(iter(loader))
    assert [np.array(batch[0][k]).tobytes() for k in range(20)] == samples
    s = summary_of(tmp_path)
    # num_files_eval: the YAML's (dlrm ships 1), as DLIO writes it with evaluation off.
    check_summary(s, epochs=2, record_length=256, au=0.90, files_train=2, files_eval=1 if name == "dlrm" else 0, spf=20)
    steps = 6 if name == "dlrm" else 10
    assert [e["steps"] for e in s["dlfeed"]["epochs"]] == [steps, steps]
    ckpt = {f.name: f.stat().st_size for f in (tmp_path / "ckpt").iterdir()}
    if name == "dlrm":
        assert ckpt == {"model-1-6-0.pt": 100, "model-2-6-0.pt": 100, "layer-0-1-6-0.pt": 5, "layer-0-2-6-0.pt": 5}
        # DLIO writes the epoch-end checkpoint inside the epoch: the epoch ends after it.
        stats = json.loads((tmp_path / "out" / "per_epoch_stats.json").read_text())
        for e in ("1", "2"):
            assert stats[e]["end"] >= stats[e]["ckpt1"]["end"], stats[e]
    else:
        # Every 4 steps of each epoch: model, optimizer (3 x 30 bytes), 2 layers (7 bytes each).
        assert ckpt["model-1-4-0.pt"] == 100 and ckpt["optimizer-2-8-0.pt"] == 90 and ckpt["layer-1-1-8-0.pt"] == 7
        assert len(ckpt) == 2 * 2 * 4


def test_all_fourteen_shipped_workloads_are_accepted(dlfeed, workloads):
    names = sorted(p.name for p in workloads.glob("*.yaml"))
    assert len(names) == 14 and {"dlrm.yaml", "megatron_deepspeed.yaml"} <= set(names)
    for name in names:
        out = dlfeed.run("dlio", workloads / name, "--dry-run").stdout
        assert "data:" in out and "refused" not in out, (name, out)
    # bert checkpoints with TensorFlow: the one difference from DLIO kept on purpose is said.
    out = dlfeed.run("dlio", workloads / "bert_v100.yaml", "--dry-run").stdout
    assert "DLIO 2.0.0's tf.train.Checkpoint saves none of its tensors" in out, out


def test_hdf5_chunks_and_yaml_false_shuffles_are_dlios(dlfeed, workloads, tmp_path):
    """enable_chunking with a chunk_size under a sample's bytes: DLIO writes chunks of (1, c, c), c =
    ceil(sqrt(chunk_size)); dlfeed wrote whole samples and said it honoured the key. A file_shuffle of
    `no` or `False` (YAML 1.1 reads them as `off` is read) was refused where `off` was read as no shuffle."""
    proc = dlio(dlfeed, workloads / "default.yaml", tmp_path, "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False", "workload.dataset.format=hdf5", "workload.dataset.num_files_train=2",
                "workload.dataset.num_files_eval=0", "workload.workflow.evaluation=False",
                "workload.dataset.record_length=4096",
                "++workload.dataset.enable_chunking=True", "++workload.dataset.chunk_size=1000")
    import h5py
    files = sorted((tmp_path / "data" / "train").rglob("*.hdf5"))
    assert files, proc.stdout
    with h5py.File(files[0]) as f:
        assert f["records"].shape[1:] == (64, 64) and f["records"].chunks == (1, 32, 32)
    for value in ("off", "no", "False"):
        out = dlfeed.run("dlio", workloads / "default.yaml", "--dry-run", f"++workload.reader.file_shuffle={value}",
                         f"++workload.reader.sample_shuffle={value}").stdout
        assert re.search(r"^order: sequential ", out, re.M), (value, out)
