"""TensorFlow adaptor: a tf.data.Dataset over a dlfeed.Loader, usable in model.fit.

    ds = dlfeed.tf.dataset("data/train", fields=["x", "y"], batch_size=64,
                           strategy="global_shuffle", seed=1)
    model.fit(ds, epochs=3)      # each pass over ds is the loader's next epoch

Zero copy into TensorFlow, outside tf.data: dlfeed.tf.to_tensor(batch, "x")
(tf.experimental.dlpack.from_dlpack of the batch's DLPack capsule).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import tensorflow as tf

from ._loader import Loader

__all__ = ["dataset", "output_signature", "to_tensor"]


# TensorFlow's kernels require EIGEN_MAX_ALIGN_BYTES (64) aligned buffers and abort
# the process on others; DLPack import does not check, so we do.
TF_ALIGNMENT = 64


def _one(t: Any) -> Any:
    if t.data_ptr % TF_ALIGNMENT == 0:
        return tf.experimental.dlpack.from_dlpack(t.__dlpack__())
    return tf.convert_to_tensor(t.numpy())  # unaligned: TensorFlow copies


def to_tensor(batch: Any, index: Any) -> Any:
    """Field ``index`` of a dlfeed.Batch as a tf.Tensor: zero copy (DLPack) when the
    field's memory is 64-byte aligned, as TensorFlow requires; a copy otherwise."""
    t = batch.tensor(index)
    if isinstance(t, list):
        return [_one(s) for s in t]
    return _one(t)


def output_signature(loader: Loader, as_dict: bool = False) -> Any:
    """The tf.TensorSpec of each field: [batch, *sample shape] with the batch dimension
    fixed when drop_last_batch is set, and None where samples' dimensions differ."""
    o = loader.options
    batch_dim = o.batch_size if o.drop_last_batch else None
    specs = []
    for name, dtype, shape in loader.field_specs():
        if shape is None:
            raise ValueError(f"field {name!r}: samples of different rank cannot be one tf.Tensor")
        specs.append((name, tf.TensorSpec(shape=(batch_dim, *shape), dtype=tf.as_dtype(dtype), name=name)))
    if as_dict:
        return {n: s for n, s in specs}
    if len(specs) == 1:
        return specs[0][1]
    return tuple(s for _, s in specs)


def dataset(paths: Any, *, as_dict: bool = False, loader: Optional[Loader] = None, **loader_kwargs: Any) -> Any:
    """A tf.data.Dataset of one dlfeed epoch per iteration.

    Elements are a tuple of the fields in order ((x, y) for model.fit), the single
    field's tensor when there is one, or a dict with as_dict=True. Keywords are
    dlfeed.Loader's; or pass an existing ``loader``. Ragged fields are not supported
    (use dlfeed.Loader directly).
    """
    if loader is None:
        loader = Loader(paths, **loader_kwargs)
    elif loader_kwargs:
        raise TypeError("give either loader= or Loader keywords, not both")
    signature = output_signature(loader, as_dict)
    names = loader.field_names

    def generate():
        for batch in loader:
            # Copies (tf.data owns its elements and may buffer many): the batch is
            # released at once, so the loader's prefetch never waits on TensorFlow.
            arrays = [np.array(batch[i], copy=True) for i in range(len(names))]
            del batch
            if as_dict:
                yield dict(zip(names, arrays))
            elif len(arrays) == 1:
                yield arrays[0]
            else:
                yield tuple(arrays)

    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # Known length: Keras then knows the steps per epoch.
    return ds.apply(tf.data.experimental.assert_cardinality(loader.batches_per_epoch))
