# SPDX-License-Identifier: Apache-2.0
"""`dlfeed run`'s rates, per format and layout: every MiB/s it prints or writes is
bytes over the epoch's time, the delivered ones with the bytes numpy, h5py and
TensorFlow find in a sample (not the sample's extents: a DLIO-layout NPZ
sample's extent spans its whole array, a compressed chunk or a TFRecord record
is not what the trainer gets), and efficiency is samples/s against the
samples/s of the calibrated limit."""
import json
import math
import os
import re

import h5py
import numpy as np
import pytest

MIB = 1 << 20
FILES, PER_FILE, SHAPE = 3, 20, (8, 12)

# name: (generate flags, run flags, folder under the output)
CASES = {
    "npy": (["--format", "npy"], [], ""),
    "npz-stored": (["--format", "npz"], [], ""),
    "npz-dlio-last-axis": (["--format", "npz", "--layout", "dlio"], ["--axis", "last"], "train"),
    "hdf5-contiguous": (["--format", "hdf5"], [], ""),
    "hdf5-chunked-deflate": (["--format", "hdf5", "--chunk-samples", 5, "--compression", "deflate"], [], ""),
    "hdf5-two-fields": (["--format", "hdf5", "--chunk-samples", 4], ["--fields", "records,labels"], ""),
    "tfrecord": (["--format", "tfrecord"], [], ""),
}


def sample_bytes(case, folder):
    """Bytes of one sample (every field the run reads), found with the library
    that reads the format, and the samples per file."""
    if case.startswith("npy"):
        a = np.load(sorted(folder.glob("*.npy"))[0], mmap_mode="r")
        return a[0].nbytes, len(a)
    if case.startswith("npz"):
        with np.load(sorted(folder.glob("*.npz"))[0]) as z:
            x = z["x"]
        if "last-axis" in case:  # DLIO's layout: samples on the last axis
            return x[..., 0].nbytes, x.shape[-1]
        return x[0].nbytes, len(x)
    if case.startswith("hdf5"):
        with h5py.File(sorted(folder.glob("*.hdf5"))[0]) as h:
            n = h["records"][0].nbytes + (h["labels"][0].nbytes if case == "hdf5-two-fields" else 0)
            return n, len(h["records"])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    records = list(tf.data.TFRecordDataset(str(sorted(folder.glob("*.tfrecord"))[0])).as_numpy_iterator())
    image = tf.train.Example.FromString(records[0]).features.feature["image"].bytes_list.value[0]
    return len(image), len(records)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, dlfeed):
    root = tmp_path_factory.mktemp("rates")
    out = {}
    for case, (gen, run, sub) in CASES.items():
        dlfeed.run("generate", *gen, "--dir", root / case, "--files", FILES, "--samples-per-file", PER_FILE,
                   "--shape", ",".join(map(str, SHAPE)), "--dtype", "float32")
        folder = root / case / sub if sub else root / case
        out[case] = (folder, run)
    return out


def run(dlfeed, tmp_path, folder, *args):
    js = tmp_path / "run.json"
    proc = dlfeed.run("run", "--summary-json", js, "--batch-size", 16, "--strategy", "global_shuffle", *args, folder)
    return json.loads(js.read_text()), proc.stdout


def per_epoch_lines(out):
    """(samples/s, MiB/s delivered) of each `epoch N:` line and (samples/s,
    MiB/s, MiB/s read) of each `AU` line, as printed."""
    first = [(float(a), float(b)) for a, b in
             re.findall(r"^epoch \d+: .*?: (\d+) samples/s, ([\d.]+) MiB/s delivered", out, flags=re.M)]
    au = [(float(a), float(b), float(c)) for a, b, c in
          re.findall(r"^  AU [\d.]+%, (\d+) samples/s, ([\d.]+) MiB/s \(([\d.]+) MiB/s read\)", out, flags=re.M)]
    return first, au


@pytest.mark.parametrize("case", list(CASES))
def test_every_mib_per_s_is_bytes_over_time(dlfeed, datasets, tmp_path, case):
    folder, flags = datasets[case]
    per_sample, per_file = sample_bytes(case, folder)
    assert per_file == PER_FILE
    s, out = run(dlfeed, tmp_path, folder, "--epochs", 2, *flags)
    r = s["run"]
    assert r["delivered_bytes_per_sample"] == per_sample
    for e in s["epochs"] + [s["total"]]:
        epochs = 2 if e is s["total"] else 1
        assert e["samples"] == FILES * PER_FILE * epochs
        assert e["bytes_delivered"] == e["samples"] * per_sample  # what numpy/h5py/TF hold
        assert e["delivered_mib_per_s"] == pytest.approx(e["bytes_delivered"] / e["wall_s"] / MIB, rel=1e-6)
        assert e["read_mib_per_s"] == pytest.approx(e["bytes_read"] / e["wall_s"] / MIB, rel=1e-6)
    for mine, e in zip(r["epochs"] + [r["total"]], s["epochs"] + [s["total"]]):
        assert mine["io_mib_per_s"] == pytest.approx(e["bytes_delivered"] / e["wall_s"] / MIB, rel=1e-6)
        assert mine["io_mib_per_s"] == pytest.approx(mine["samples_per_s"] * per_sample / MIB, rel=1e-6)
        assert mine["delivered_mib_per_s"] == pytest.approx(e["delivered_mib_per_s"], rel=1e-6)
        assert mine["read_mib_per_s"] == pytest.approx(e["read_mib_per_s"], rel=1e-6)
    first, au = per_epoch_lines(out)
    assert len(first) == len(au) == 2, out
    for (sps, mib), e in zip(first, s["epochs"]):
        # The consumer's own clock (a little apart from the counters'): MiB/s is
        # its samples/s times the bytes of a sample, within the printed rounding.
        assert abs(mib - sps * per_sample / MIB) <= 0.05 + 0.5 * per_sample / MIB + 1e-9, (mib, sps)
    for (sps, mib, read), mine in zip(au, r["epochs"]):
        assert sps == round(mine["samples_per_s"]) and mib == round(mine["io_mib_per_s"], 1)
        assert read == round(mine["read_mib_per_s"], 1)
    if "last-axis" in case:
        # The figure the issue caught: a sample's extent spans every sample of
        # its array, so samples/s x extent bytes overstated the rate 20x here.
        assert r["record_bytes"] > 10 * per_sample


@pytest.mark.parametrize("case", ["npz-dlio-last-axis", "hdf5-chunked-deflate", "tfrecord", "hdf5-two-fields"])
def test_efficiency_is_samples_per_s_over_the_limits(dlfeed, datasets, tmp_path, case):
    folder, flags = datasets[case]
    per_sample, _ = sample_bytes(case, folder)
    cal_path = tmp_path / "cal.json"
    dlfeed.run("calibrate", "--out", cal_path, "--patterns", "random", *flags, folder)
    cal = json.loads(cal_path.read_text())
    limit = cal["patterns"]["random"]["limit_mib_per_s"]
    # Calibrate reads a sample's extents, as the loader does: its limit in
    # samples/s is its MiB/s of extents over the extent bytes of a sample.
    limit_sps = limit * MIB / cal["dataset"]["sample_bytes"]
    s, out = run(dlfeed, tmp_path, folder, "--calibration", cal_path, *flags)
    r = s["run"]
    assert r["calibration"]["limit_samples_per_s"] == pytest.approx(limit_sps, rel=1e-6)
    for mine in r["epochs"] + [r["total"]]:
        assert mine["efficiency"] == pytest.approx(mine["samples_per_s"] / limit_sps, rel=1e-6)
        # The same ratio in delivered MiB/s: the run's over the limit's samples/s x a sample's bytes.
        assert mine["efficiency"] == pytest.approx(mine["io_mib_per_s"] / (limit_sps * per_sample / MIB), rel=1e-6)
    m = re.search(r"efficiency ([\d.]+)% of the random limit (\d+) samples/s \([^,]+, ([\d.]+) MiB/s as delivered\)",
                  out)
    assert m, out
    assert float(m.group(1)) == round(r["epochs"][0]["efficiency"] * 100, 1)
    assert int(m.group(2)) == round(limit_sps)
    assert math.isclose(float(m.group(3)), limit_sps * per_sample / MIB, abs_tol=0.05 + 1e-9)
    assert re.search(r"^efficiency: [\d.]+% of the random limit", out, flags=re.M)
