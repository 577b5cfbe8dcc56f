"""dlfeed.tf: a tf.data.Dataset with a correct output_signature, training a Keras
model; zero copy into TensorFlow through DLPack."""
import ctypes

import numpy as np
import pytest
import tensorflow as tf

import dlfeed
import dlfeed.tf as dtf
from test_py_datasets import FORMATS, learnable, loader_kwargs  # noqa: F401 (fixture)


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
