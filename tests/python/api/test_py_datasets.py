# SPDX-License-Identifier: Apache-2.0
"""dlfeed.Loader reads exactly what numpy, h5py and TensorFlow wrote: the learnable
datasets of py_datasets.py (the ``learnable`` fixture, conftest.py)."""
import numpy as np
import pytest

import dlfeed
from py_datasets import FORMATS, SHAPE, loader_kwargs


@pytest.mark.parametrize("fmt", FORMATS)
def test_reads_what_numpy_h5py_tensorflow_wrote(learnable, fmt):
    root, x, y = learnable[fmt]
    loader = dlfeed.Loader(root, batch_size=24, strategy="global_shuffle", seed=3, **loader_kwargs(fmt))
    seen = []
    for batch in loader:
        xb, yb = batch[0], batch[1]
        assert xb.dtype == np.float32 and xb.shape[1:] == SHAPE and yb.shape == (len(batch),)
        ids = batch.sample_ids
        np.testing.assert_array_equal(xb, x[ids])
        np.testing.assert_array_equal(yb, y[ids])
        seen.extend(ids.tolist())
    assert sorted(seen) == list(range(len(x)))  # each sample exactly once
    assert seen != sorted(seen)  # and shuffled
