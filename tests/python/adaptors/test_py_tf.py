# SPDX-License-Identifier: Apache-2.0
"""dlfeed.tf: a tf.data.Dataset with a correct output_signature, training a Keras
model; zero copy into TensorFlow through DLPack."""
import ctypes

import numpy as np
import pytest
import tensorflow as tf

import dlfeed
import dlfeed.tf as dtf
from py_datasets import FORMATS, loader_kwargs, rss_growth


@pytest.mark.parametrize("fmt", FORMATS)
def test_keras_fit_learns_from_dlfeed(learnable, fmt):
    root, _, _ = learnable[fmt]
    tf.keras.utils.set_random_seed(0)
    ds = dtf.dataset(root, batch_size=8, strategy="global_shuffle", seed=1, **loader_kwargs(fmt))
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [None, 8, 8] and x_spec.dtype == tf.float32
    assert y_spec.shape.as_list() == [None] and y_spec.dtype == tf.int64
    model = tf.keras.Sequential([tf.keras.Input((8, 8)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.5),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.evaluate(ds, verbose=0)
    history = model.fit(ds, epochs=1, verbose=0)
    after = model.evaluate(ds, verbose=0)
    assert after < 0.5 * before, (before, history.history, after)


def test_output_signature_fixed_batch_and_dict(learnable):
    root, _, _ = learnable["npz"]
    ds = dtf.dataset(root, batch_size=10, drop_last_batch=True, as_dict=True, **loader_kwargs("npz"))
    assert ds.element_spec["x"].shape.as_list() == [10, 8, 8]
    assert ds.element_spec["y"].shape.as_list() == [10]
    n = 0
    for el in ds:
        assert el["x"].shape == (10, 8, 8)
        np.testing.assert_array_equal(el["y"].numpy() % 10, el["y"].numpy())
        n += 1
    assert n == 25


def capsule_data_ptr(capsule):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.c_void_p.from_address(get(capsule, b"dltensor")).value  # DLTensor.data


def test_tf_from_dlpack_shares_memory_when_aligned(learnable):
    root, x_all, _ = learnable["hdf5"]
    loader = dlfeed.Loader(root, batch_size=8, **loader_kwargs("hdf5"))
    aligned = 0
    for batch in loader:
        for name in ("records", "labels"):
            t = dtf.to_tensor(batch, name)
            np.testing.assert_array_equal(t.numpy(), batch[name])
            if batch.tensor(name).data_ptr % dtf.TF_ALIGNMENT == 0:
                aligned += 1
                assert capsule_data_ptr(tf.experimental.dlpack.to_dlpack(t)) == batch.tensor(name).data_ptr
        del batch
    if aligned == 0:
        pytest.xfail("no batch buffer was 64-byte aligned (TensorFlow needs it for zero copy)")


# ---------------------------------------------------------------- the feed
# dlfeed.tf.dataset hands TensorFlow the batches' own memory (no copy), so
# these tests check what that must not break: TensorFlow's own reading of the
# same files, every sample once per pass, tensors that stay valid while the
# loader recycles its buffers, and consumers that hold many elements.

import glob
import os
import subprocess
import threading

from conftest import dlfeed_binary

DLIO_SAMPLE = 4000  # bytes of each generated `image`


@pytest.fixture(scope="module")
def dlio_tfrecord(tmp_path_factory):
    """`dlfeed generate --format tfrecord --layout dlio`: 3 files x 40 Examples
    (image: 4000 random bytes, size: int64); returns the train folder."""
    root = tmp_path_factory.mktemp("dlio_tfrecord")
    subprocess.run([dlfeed_binary(), "generate", "--format", "tfrecord", "--layout", "dlio", "--dir", str(root),
                    "--files", "3", "--samples-per-file", "40", "--shape", str(DLIO_SAMPLE)],
                   check=True, capture_output=True)
    return root / "train"


def tf_parse(root):
    """Every Example as TensorFlow itself parses it: sorted (image bytes, size)."""
    files = sorted(glob.glob(os.path.join(root, "*.tfrecord")))
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "size": tf.io.FixedLenFeature([], tf.int64)}
    out = [(ex["image"].numpy(), int(ex["size"]))
           for ex in tf.data.TFRecordDataset(files).map(lambda s: tf.io.parse_single_example(s, spec))]
    return sorted(out)


def pass_samples(ds):
    """One pass over a dataset of (image [B, 4000] uint8, size [B, 1] int64): (image bytes, size) per sample."""
    got = []
    for image, size in ds:
        assert image.dtype == tf.uint8 and size.dtype == tf.int64
        assert image.shape[1:] == (DLIO_SAMPLE,) and size.shape == (image.shape[0], 1)
        image, size = image.numpy(), size.numpy().reshape(-1)
        got.extend((image[i].tobytes(), int(size[i])) for i in range(len(image)))
    return got


def test_elements_match_tensorflows_own_parse_byte_for_byte(dlio_tfrecord):
    want = tf_parse(dlio_tfrecord)
    assert len(want) == 120 and len({img for img, _ in want}) == 120  # distinct: the comparison means something
    ds = dtf.dataset(dlio_tfrecord, fields=["image", "size"], batch_size=16, strategy="global_shuffle", seed=5)
    assert ds.cardinality().numpy() == 8
    first, second = pass_samples(ds), pass_samples(ds)
    assert sorted(first) == want and sorted(second) == want  # every sample once per pass, byte for byte
    assert first != second  # each pass is the loader's next epoch (another permutation)


def test_a_loader_restored_at_an_epochs_end_passes_over_the_next_epoch(dlio_tfrecord):
    # The resume point docs/python.md gives dlfeed.tf users (an epoch boundary): the pass is
    # the next epoch, whole (found by outside testing: an empty pass, refused by the
    # dataset's cardinality check, and Keras' fit failed).
    kw = dict(fields=["image", "size"], batch_size=16, strategy="global_shuffle", seed=5)
    done = dlfeed.Loader(dlio_tfrecord, **kw)
    for _ in done.iter_epoch(3):
        pass
    state = done.state()
    assert dlfeed.decode_state(state)["position"] == 120
    want = [[bytes(b["image"][i]) for i in range(len(b))] for e in (4, 5)
            for b in [*dlfeed.Loader(dlio_tfrecord, **kw).iter_epoch(e)]]
    resumed = dlfeed.Loader(dlio_tfrecord, **kw)
    resumed.restore(state)
    ds = dtf.dataset(loader=resumed)
    got = [[img.numpy()[i].tobytes() for i in range(img.shape[0])] for e in range(2) for img, _ in ds]
    assert got == want


def test_single_field_elements_are_tensors(dlio_tfrecord):
    ds = dtf.dataset(dlio_tfrecord, fields=["image"], batch_size=50)
    sizes = [el.shape[0] for el in ds]  # a tf.Tensor, not a 1-tuple
    assert sizes == [50, 50, 20]


def test_elements_share_the_batch_memory(dlio_tfrecord, monkeypatch):
    """The tensors TensorFlow yields are in the loader's batch buffers (zero copy)."""
    batches = []
    original = dlfeed._loader.EpochIterator.next

    def recording(self):
        batch = original(self)
        if batch is not None:
            batches.append([batch.tensor(k).data_ptr for k in range(len(batch.keys()))])
        return batch

    monkeypatch.setattr(dlfeed._loader.EpochIterator, "next", recording)
    ds = dtf.dataset(dlio_tfrecord, fields=["image", "size"], batch_size=16)
    seen = [[capsule_data_ptr(tf.experimental.dlpack.to_dlpack(t)) for t in el] for el in ds]
    assert len(seen) == 8 and seen == batches


def test_held_elements_stay_valid_while_the_loader_recycles_buffers(dlio_tfrecord):
    ds = dtf.dataset(dlio_tfrecord, fields=["image", "size"], batch_size=16, strategy="global_shuffle", seed=2)
    held = []
    for k, (image, size) in enumerate(ds):
        if k % 3 == 0:
            held.append((image, size, image.numpy().copy(), size.numpy().copy()))  # .numpy() copies
    for _ in range(3):  # later passes reuse the pool's buffers, unless a held tensor still owns them
        for image, size in ds:
            del image, size
    for image, size, image_then, size_then in held:
        np.testing.assert_array_equal(image.numpy(), image_then)
        np.testing.assert_array_equal(size.numpy(), size_then)


def run_with_timeout(fn, seconds=120):
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still waiting after {seconds} s: the feed hangs when elements are held"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("hold", ["list", "prefetch"])
def test_holding_every_element_does_not_hang(dlio_tfrecord, hold):
    """Held elements keep their batches, which count against memory_budget (here two
    batches' worth); the loader then hands out one batch at a time: slower, never stuck."""
    batch_bytes = 16 * (DLIO_SAMPLE + 8)
    ds = dtf.dataset(dlio_tfrecord, fields=["image", "size"], batch_size=16, strategy="global_shuffle", seed=3,
                     memory_budget=2 * batch_bytes, prefetch="depth:8")
    if hold == "prefetch":
        ds = ds.prefetch(64)  # tf.data buffers the whole epoch
    want = tf_parse(dlio_tfrecord)
    for _ in range(2):
        elements = run_with_timeout(lambda: list(ds))
        assert len(elements) == 8
        assert sorted(pass_samples(elements)) == want
        del elements


def test_superseded_iteration_fails_instead_of_stealing_batches(dlio_tfrecord):
    ds = dtf.dataset(dlio_tfrecord, fields=["image", "size"], batch_size=16, strategy="global_shuffle", seed=4)
    old = iter(ds)
    next(old)
    new_pass = pass_samples(ds)  # a second iteration while `old` is alive: the loader's epoch restarts
    assert sorted(new_pass) == tf_parse(dlio_tfrecord)
    with pytest.raises(tf.errors.OpError, match="superseded"):
        for _ in old:
            pass


def test_memory_stays_bounded_over_passes(tmp_path):
    """16 MiB of samples, 8 passes: without a leak of batches (each pass's tensors
    keep their batch until released) RSS stays flat after the first passes."""
    subprocess.run([dlfeed_binary(), "generate", "--format", "tfrecord", "--layout", "dlio", "--dir", str(tmp_path),
                    "--files", "4", "--samples-per-file", "128", "--shape", "32768"], check=True, capture_output=True)
    ds = dtf.dataset(tmp_path / "train", fields=["image", "size"], batch_size=32, strategy="global_shuffle")
    total = 0

    def one_pass():
        nonlocal total
        for image, size in ds:
            total += int(np.asarray(image)[:, ::4096].sum()) + int(np.asarray(size).sum())

    grown = rss_growth(one_pass, passes=8)  # after 2 warm passes: pool, allocator, tf.data
    assert grown < 16 << 20, f"RSS grew {grown / 2**20:.1f} MiB over 8 passes of 16 MiB"


# ---- variable-length features: ragged=True / pad=True ----

def _varlen_fixture(path, compression=""):
    """TensorFlow writes 23 Examples whose 'tokens' (int64) and 'text' (bytes) vary in
    length per record, and a fixed 'label'; returns [(label, tokens, text)]."""
    rng = np.random.default_rng(11)
    rows = []
    with tf.io.TFRecordWriter(str(path), options=tf.io.TFRecordOptions(compression_type=compression)) as w:
        for k in range(23):
            tokens = rng.integers(-2**40, 2**40, size=1 + (k * 7) % 9).tolist()
            text = bytes(rng.integers(0, 256, size=(k * 5) % 13 + 1, dtype=np.uint8))
            feature = {
                "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=tokens)),
                "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[k])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            rows.append((k, tokens, text))
    return rows


@pytest.fixture(params=["", "GZIP"])
def varlen(request, tmp_path):
    path = tmp_path / ("v.tfrecord.gz" if request.param else "v.tfrecord")
    return path, _varlen_fixture(path, request.param)


def test_variable_length_without_an_option_names_the_feature_and_lengths(varlen):
    path, rows = varlen
    # The error is the adaptor's, mid-epoch: the loader's epoch stays open
    # (tf.data keeps the loader alive) until it is closed. Closed here, so no
    # later test in this process forks while its pipeline runs.
    with dlfeed.Loader(path, fields=["tokens", "label"], batch_size=5) as loader:
        ds = dtf.dataset(loader=loader)
        with pytest.raises(Exception) as e:
            for _ in ds:
                pass
    msg = str(e.value)
    assert "'tokens'" in msg and "different lengths" in msg and "ragged=True" in msg and "pad=True" in msg, msg
    lengths = sorted({len(t) for _, t, _ in rows[:5]})  # the first batch's (sequential order)
    assert "lengths " + ", ".join(map(str, lengths)) in msg, msg


def test_ragged_gives_ragged_tensors_matching_tensorflows_parse(varlen):
    path, rows = varlen
    compressed = path.suffix == ".gz"
    ds = dtf.dataset(path, fields=["tokens", "text", "label"], batch_size=4, ragged=["tokens", "text"],
                     strategy="global_shuffle", seed=2)
    tok_spec, text_spec, label_spec = ds.element_spec
    assert isinstance(tok_spec, tf.RaggedTensorSpec) and tok_spec.dtype == tf.int64
    assert isinstance(text_spec, tf.RaggedTensorSpec) and text_spec.dtype == tf.uint8
    # A compressed file's lengths are known at open (label: 1); a plain one's after decode.
    assert isinstance(label_spec, tf.TensorSpec) and label_spec.shape.as_list() == [None, 1 if compressed else None]
    # TensorFlow's own reading of the same file, as the reference.
    spec = {"tokens": tf.io.RaggedFeature(tf.int64), "text": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}
    want = sorted((int(ex["label"]), ex["tokens"].numpy().tolist(), ex["text"].numpy())
                  for ex in tf.data.TFRecordDataset(str(path), compression_type="GZIP" if compressed else "")
                  .map(lambda r: tf.io.parse_single_example(r, spec)))
    assert want == sorted(rows)
    for _ in range(2):
        got = []
        for tokens, text, label in ds:
            assert isinstance(tokens, tf.RaggedTensor) and isinstance(text, tf.RaggedTensor)
            for t, x, y in zip(tokens.to_list(), text.to_list(), label.numpy().reshape(-1)):
                got.append((int(y), t, bytes(x)))
        assert sorted(got) == want
    # ragged=True: every field whose length is not known to be fixed.
    ds = dtf.dataset(path, fields=["tokens", "label"], batch_size=4, ragged=True)
    assert isinstance(ds.element_spec[0], tf.RaggedTensorSpec)
    assert isinstance(ds.element_spec[1], tf.TensorSpec if compressed else tf.RaggedTensorSpec)
    got = [(int(np.asarray(y).reshape(-1)[0]), t) for tokens, label in ds
           for t, y in zip(tokens.to_list(), label.to_list() if not compressed else label.numpy())]
    assert got == [(k, t) for k, t, _ in rows]


def test_pad_pads_each_batch_to_its_longest(varlen):
    path, rows = varlen
    ds = dtf.dataset(path, fields=["tokens", "label"], batch_size=6, pad=["tokens"], pad_value=-7)
    assert ds.element_spec[0].shape.as_list() == [None, None]
    seen = 0
    for tokens, label in ds:
        tokens = tokens.numpy()
        batch = rows[seen:seen + len(tokens)]
        assert tokens.shape == (len(batch), max(len(t) for _, t, _ in batch))
        for row, (k, t, _) in zip(tokens, batch):
            assert row[:len(t)].tolist() == t and (row[len(t):] == -7).all()
        assert label.numpy().reshape(-1).tolist() == [k for k, _, _ in batch]
        seen += len(tokens)
    assert seen == len(rows)


def test_ragged_and_pad_options_are_checked(varlen):
    path, _ = varlen
    with pytest.raises(ValueError, match="no field 'nope'"):
        dtf.dataset(path, fields=["tokens"], batch_size=2, ragged=["nope"])
    with pytest.raises(ValueError, match="not both"):
        dtf.dataset(path, fields=["tokens"], batch_size=2, ragged=True, pad=True)


def test_big_endian_fields_arrive_as_their_values(tmp_path):
    # tf.numpy_function and tf.convert_to_tensor read a big-endian array's bytes as native: 1.0
    # arrived as 4.6e-41. dlfeed.tf gives the values (a copy in the machine's byte order).
    import h5py
    np.save(tmp_path / "x.npy", np.arange(6, dtype=">f4"))
    (got,) = [t.numpy() for t in dtf.dataset(tmp_path / "x.npy", batch_size=6)]
    assert got.dtype == np.float32 and got.tolist() == [0, 1, 2, 3, 4, 5]
    loader = dlfeed.Loader(tmp_path / "x.npy", batch_size=6)
    assert dtf.to_tensor(next(iter(loader)), "data").numpy().tolist() == [0, 1, 2, 3, 4, 5]
    (tmp_path / "r").mkdir()
    with h5py.File(tmp_path / "r" / "a.h5", "w") as f:
        f["records"] = np.arange(4, dtype=">i8").reshape(2, 2)
    with h5py.File(tmp_path / "r" / "b.h5", "w") as f:
        f["records"] = np.arange(3, dtype=">i8").reshape(1, 3)
    for kw in ({"pad": True}, {"ragged": True}):
        (t,) = list(dtf.dataset(tmp_path / "r", batch_size=3, strategy="sequential", **kw))
        rows = t.to_list() if kw.get("ragged") else t.numpy().tolist()
        assert rows == ([[0, 1, 0], [2, 3, 0], [0, 1, 2]] if kw.get("pad") else [[0, 1], [2, 3], [0, 1, 2]])
