# SPDX-License-Identifier: Apache-2.0
"""NumPy 2's __array__(dtype=None, copy=None) on dlfeed.Tensor and dlfeed.Batch:
the batch's memory unless a copy is asked for or needed; copy=False with a
dtype that needs one raises ValueError, as numpy does."""
import numpy as np
import pytest

import dlfeed


@pytest.fixture
def batch(learnable):  # noqa: F811
    root, x, _ = learnable["npz"]
    loader = dlfeed.Loader(root, fields=["x", "y"], batch_size=16)
    b = next(iter(loader))
    return b, x[b.sample_ids]


def test_no_copy_by_default_and_with_copy_false(batch):
    b, expected = batch
    t = b.tensor("x")
    for a in (np.asarray(t), t.__array__(), t.__array__(copy=False), t.__array__(dtype=np.float32, copy=False),
              np.asarray(t, dtype=np.float32)):
        assert a.ctypes.data == t.data_ptr
        np.testing.assert_array_equal(a, expected)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        assert np.asarray(t, copy=False).ctypes.data == t.data_ptr


def test_copy_true_gives_an_owned_copy(batch):
    b, expected = batch
    t = b.tensor("x")
    a = t.__array__(copy=True)
    assert a.ctypes.data != t.data_ptr and a.flags.owndata
    np.testing.assert_array_equal(a, expected)
    a[...] = -1  # the batch is untouched
    np.testing.assert_array_equal(b["x"], expected)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        c = np.array(t, copy=True)
        assert c.ctypes.data != t.data_ptr
        np.testing.assert_array_equal(c, expected)


def test_another_dtype_converts_or_refuses(batch):
    b, expected = batch
    t = b.tensor("x")
    a = t.__array__(dtype=np.float64)
    assert a.dtype == np.float64 and a.ctypes.data != t.data_ptr
    np.testing.assert_array_equal(a, expected.astype(np.float64))
    assert np.asarray(t, dtype="int32").dtype == np.int32
    with pytest.raises(ValueError, match="needs a copy, and copy=False"):
        t.__array__(dtype=np.float64, copy=False)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        with pytest.raises(ValueError):
            np.asarray(t, dtype=np.float64, copy=False)


def test_batch_of_one_field_is_an_array(learnable):  # noqa: F811
    root, x, _ = learnable["npz"]
    one = next(iter(dlfeed.Loader(root, fields=["x"], batch_size=8)))
    a = np.asarray(one)
    assert a.ctypes.data == one.tensor("x").data_ptr
    np.testing.assert_array_equal(a, x[one.sample_ids])
    assert np.asarray(one, dtype=np.float64).dtype == np.float64
    two = next(iter(dlfeed.Loader(root, fields=["x", "y"], batch_size=8)))
    with pytest.raises(TypeError, match="one uniform field"):
        two.__array__()
