# SPDX-License-Identifier: Apache-2.0
"""`dlfeed dlio` with DLIO's `storage_type: s3` (a real SeaweedFS server): the bucket is
storage_root and the keys start with data_folder, as DLIO's S3 storage takes them. Data
generated locally by `dlfeed dlio` and uploaded reads from the bucket as it read from the
folder: the same steps and bytes, DLIO's TFRecord index files found under index/train."""
import json

import pytest

import dlfeed
from cli.test_dlio_cli import dlio, summary_of, workloads  # noqa: F401 (a fixture)

BUCKET = "dlio"

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")


@pytest.mark.parametrize("name,fmt", [("default", "npz"), ("resnet50_h100", "tfrecord")])
def test_dlio_reads_its_data_from_a_bucket(dlfeed, workloads, s3_server, tmp_path, monkeypatch, name, fmt):  # noqa: F811
    s3_server.apply_env(monkeypatch)
    common = ["workload.dataset.num_files_train=4", "workload.dataset.num_samples_per_file=4",
              "workload.dataset.record_length=4096", "workload.reader.batch_size=2", "++workload.train.epochs=2",
              "workload.train.computation_time=0.001", "++workload.workflow.checkpoint=False",
              "++workload.workflow.evaluation=False"]
    local = tmp_path / "local"
    dlio(dlfeed, workloads / f"{name}.yaml", local, "++workload.workflow.generate_data=True", *common)
    s3_server.upload_dir(local / "data", BUCKET, f"{name}/data/")
    remote = tmp_path / "remote"
    proc = dlio(dlfeed, workloads / f"{name}.yaml", remote, *common, "++workload.storage.storage_type=s3",
                f"++workload.storage.storage_root={BUCKET}",
                f"++workload.dataset.data_folder={name}/data", f"++workload.output.folder={remote}/out",
                folders=False)
    assert f"s3://{BUCKET}/{name}/data/train" in proc.stdout
    a, b = summary_of(local), summary_of(remote)
    assert b["dlfeed"]["data_folder"] == f"s3://{BUCKET}/{name}/data"
    assert [e["steps"] for e in b["dlfeed"]["epochs"]] == [e["steps"] for e in a["dlfeed"]["epochs"]] == [8, 8]
    for key in ("samples", "bytes_delivered"):
        assert b["dlfeed"]["train_counters"]["total"][key] == a["dlfeed"]["train_counters"]["total"][key] > 0
    assert json.dumps(b["dlfeed"]["honoured"]).count("storage_type") == 1


def test_dlio_s3_needs_a_bucket_and_does_not_generate(dlfeed, workloads, s3_server, tmp_path, monkeypatch):  # noqa: F811
    s3_server.apply_env(monkeypatch)
    err = dlfeed.error("dlio", workloads / "default.yaml", "++workload.storage.storage_type=s3",
                       f"++workload.output.folder={tmp_path}/out")
    assert "storage_root names the bucket with storage_type s3" in err
    err = dlfeed.error("dlio", workloads / "default.yaml", "++workload.storage.storage_type=s3",
                       f"++workload.storage.storage_root={BUCKET}", "++workload.workflow.generate_data=True",
                       f"++workload.output.folder={tmp_path}/out")
    assert "dlfeed generates into local files only" in err and f"s3://{BUCKET}/" in err
    # An empty data_folder: the keys start at the bucket's top (train/, valid/).
    out = dlfeed.run("dlio", workloads / "default.yaml", "--dry-run", "++workload.storage.storage_type=s3",
                     f"++workload.storage.storage_root={BUCKET}", "++workload.dataset.data_folder=",
                     f"++workload.output.folder={tmp_path}/out").stdout
    assert f"s3://{BUCKET}/train for training" in out
