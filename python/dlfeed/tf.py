# SPDX-License-Identifier: Apache-2.0
"""TensorFlow adaptor: a tf.data.Dataset over a dlfeed.Loader, usable in model.fit.

    ds = dlfeed.tf.dataset("data/train", fields=["x", "y"], batch_size=64,
                           strategy="global_shuffle", seed=1)
    model.fit(ds, epochs=3)      # each pass over ds is the loader's next epoch

Zero copy into TensorFlow, outside tf.data: dlfeed.tf.to_tensor(batch, "x")
(tf.experimental.dlpack.from_dlpack of the batch's DLPack capsule).

How the dataset is fed (measured in docs/performance.md, "dlfeed.tf adaptor"):
every pass is ``from_tensors(0).map(start).flat_map(range(n).map(next_batch))``
where ``start`` and ``next_batch`` are ``tf.numpy_function`` calls into
:class:`_Feed`. ``next_batch`` returns the batch's own numpy arrays; their
memory is 64-byte aligned, which TensorFlow wraps as a tensor without a copy,
so an element keeps its dlfeed batch alive until TensorFlow drops it (held
elements count against the loader's memory budget; docs/python.md). This
replaced ``Dataset.from_generator`` over copies of the batches: two copies per
batch (ours, then TensorFlow's, since a large numpy copy is only 16-byte
aligned), both into freshly mapped pages, and an eager py_func with structure
checks per element.
"""
from __future__ import annotations

import operator
import os
import sys
import threading
from typing import TYPE_CHECKING, AbstractSet, Any, List, Optional, Sequence, Set, Union

import numpy as np
import tensorflow as tf

from . import _options
from ._kwargs import TfDatasetKwargs
from ._loader import Loader
from ._structure import pack

# typing.Unpack from Python 3.11; before, only type checkers need it (the
# annotations are strings: `from __future__ import annotations`).
if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["dataset", "output_signature", "to_tensor"]


# TensorFlow's kernels require EIGEN_MAX_ALIGN_BYTES (64) aligned buffers and abort
# the process on others; DLPack import does not check, so we do.
TF_ALIGNMENT = 64


def _native(a: np.ndarray) -> np.ndarray:
    """`a` in the machine's byte order: tf.numpy_function and tf.convert_to_tensor read a
    big-endian array's bytes as if they were native."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _one(t: Any) -> Any:
    if t.data_ptr % TF_ALIGNMENT == 0:
        return tf.experimental.dlpack.from_dlpack(t.__dlpack__())
    return tf.convert_to_tensor(_native(t.numpy()))  # unaligned: TensorFlow copies


def to_tensor(batch: Any, index: Any) -> Any:
    """Field ``index`` of a dlfeed.Batch as a tf.Tensor: zero copy (DLPack) when the
    field's memory is 64-byte aligned, as TensorFlow requires; a copy otherwise (and for a
    big-endian field, in the machine's byte order: TensorFlow has no such type)."""
    t = batch.tensor(index)
    try:
        if isinstance(t, list):
            return [_one(s) for s in t]
        return _one(t)
    except BufferError:  # a big-endian field: DLPack has no such type
        a = batch[index]
        if isinstance(a, list) and a and not a[0].dtype.isnative:
            return [tf.convert_to_tensor(_native(s)) for s in a]
        if isinstance(a, np.ndarray) and not a.dtype.isnative:
            return tf.convert_to_tensor(_native(a))
        raise


def _names(option: Union[bool, Sequence[str]], loader: Loader, what: str) -> Set[str]:
    """The fields an option (ragged=, pad=) applies to: True means every field whose
    samples' length is not known to be one (a None dimension in field_specs)."""
    if option is True:
        return {n for n, _, shape in loader.field_specs() if shape is None or None in shape}
    if not option:
        return set()
    names = [option] if isinstance(option, str) else list(option)
    unknown = [n for n in names if n not in loader.field_names]
    if unknown:
        raise ValueError(f"{what}: no field {unknown[0]!r} among {loader.field_names}")
    return set(names)


def _field_specs(loader: Loader, ragged: AbstractSet[str] = frozenset(),
                 pad: AbstractSet[str] = frozenset()) -> List[Any]:
    o = loader.options
    batch_dim = o.batch_size if o.drop_last_batch else None
    specs = []
    for name, dtype, shape in loader.field_specs():
        if shape is None:
            raise ValueError(f"field {name!r}: samples of different rank cannot be one tf.Tensor")
        if name in ragged or name in pad:
            if not shape:
                raise ValueError(f"field {name!r}: its samples are scalars; ragged=/pad= apply to samples whose "
                                 "first dimension varies")
            inner = tuple(shape[1:])
            if None in inner:
                raise ValueError(f"field {name!r}: sample shape {shape} varies beyond its first dimension; "
                                 "ragged=/pad= handle a varying first dimension only")
            if name in ragged:
                specs.append(tf.RaggedTensorSpec(shape=(batch_dim, None, *inner), dtype=tf.as_dtype(dtype),
                                                 ragged_rank=1, row_splits_dtype=tf.int64))
                continue
            shape = (None, *inner)
        specs.append(tf.TensorSpec(shape=(batch_dim, *shape), dtype=tf.as_dtype(dtype), name=name))
    return specs


def output_signature(loader: Loader, as_dict: bool = False, *, ragged: Union[bool, Sequence[str]] = False,
                     pad: Union[bool, Sequence[str]] = False) -> Any:
    """The spec of each field: tf.TensorSpec [batch, *sample shape] with the batch dimension
    fixed when drop_last_batch is set, and None where samples' dimensions differ or are
    known only after decode; tf.RaggedTensorSpec [batch, None, ...] for ragged fields."""
    specs = _field_specs(loader, _names(ragged, loader, "ragged"), _names(pad, loader, "pad"))
    return pack(loader.field_names, specs, as_dict)


def _lengths(arrays: List[np.ndarray]) -> str:
    seen = sorted({a.shape for a in arrays})
    shown = ", ".join(str(s[0]) if len(s) == 1 else str(s) for s in seen[:8])
    return shown + (f" and {len(seen) - 8} more" if len(seen) > 8 else "")


class _Feed:
    """The Python end of one dlfeed.tf.dataset. TensorFlow calls it through
    tf.numpy_function (on tf.data's threads, holding the GIL only while Python
    runs: the loader's next() releases it while it waits)."""

    def __init__(self, loader: Loader, ragged: AbstractSet[str] = frozenset(), pad: AbstractSet[str] = frozenset(),
                 pad_value: Any = 0) -> None:
        self.loader = loader
        self.fields = range(len(loader.field_names))
        self.names = loader.field_names
        self.ragged = ragged
        self.pad = pad
        self.pad_value = pad_value
        self.lock = threading.Lock()  # one pass, one consumer of the loader at a time
        self.pass_id = 0
        self.epoch: Any = None  # the running pass's EpochIterator

    def start(self, _unused: Any) -> Any:
        """A new pass over the dataset: the loader's next epoch. Returns the pass's id
        and how many batches it has (all of the epoch's, or the rest after a restore)."""
        with self.lock:
            self.pass_id += 1
            self.epoch = iter(self.loader)
            count = operator.length_hint(self.epoch)  # restored at an epoch's end: the next, whole
            if count == 0:
                self.epoch.next()  # an empty epoch: over now
            return np.int64(self.pass_id), np.int64(count)

    def next_batch(self, pass_id: Any) -> List[np.ndarray]:
        """The pass's next batch: its fields' arrays in the batch's own memory."""
        with self.lock:
            if pass_id != self.pass_id:
                raise RuntimeError("dlfeed.tf: this iteration over the dataset was superseded by a newer one "
                                   "(one dlfeed.tf.dataset is one loader: iterate it once at a time)")
            batch = self.epoch.next()
            if batch is not None and operator.length_hint(self.epoch) == 0:
                # The pass's last batch: see the epoch end now (tf.data asks for no
                # more), so that the loader's next pass is its next epoch.
                self.epoch.next()
        if batch is None:
            raise RuntimeError("dlfeed.tf: the loader's epoch ended before the batches it announced")
        out: List[np.ndarray] = []
        for f in self.fields:
            name = self.names[f]
            a = batch[f]  # one array, or a list of arrays when the samples' shapes differ
            if name in self.ragged:
                parts = a if isinstance(a, list) else list(a)
                self._check_inner(name, parts)
                out += [np.concatenate(parts), np.array([len(p) for p in parts], dtype=np.int64)]
            elif name in self.pad:
                if not isinstance(a, list):
                    out.append(a)
                    continue
                self._check_inner(name, a)
                longest = max(len(p) for p in a)
                padded = np.full((len(a), longest, *a[0].shape[1:]), self.pad_value, dtype=a[0].dtype)
                for i, p in enumerate(a):
                    padded[i, :len(p)] = p
                out.append(padded)
            elif isinstance(a, list):
                raise ValueError(
                    f"dlfeed.tf: field {name!r} has samples of different lengths in batch {batch.index} of epoch "
                    f"{batch.epoch} (lengths {_lengths(a)}): one tf.Tensor batch needs one shape. Pass "
                    f"ragged=True (tf.RaggedTensor batches) or pad=True (padded to the batch's longest sample) "
                    f"to dlfeed.tf.dataset")
            else:
                out.append(a)
        return [_native(a) for a in out]

    @staticmethod
    def _check_inner(name: str, parts: List[np.ndarray]) -> None:
        inner = {p.shape[1:] for p in parts}
        if len(inner) > 1:
            raise ValueError(f"dlfeed.tf: field {name!r}: samples differ beyond their first dimension "
                             f"({_lengths(parts)}); ragged=/pad= handle a varying first dimension only")


def dataset(paths: Any = None, *, as_dict: bool = False, loader: Optional[Loader] = None,
            ragged: Union[bool, Sequence[str]] = False, pad: Union[bool, Sequence[str]] = False,
            pad_value: Any = 0, device: Optional[str] = None, **loader_kwargs: Unpack[TfDatasetKwargs]) -> Any:
    """A tf.data.Dataset of one dlfeed epoch per iteration.

    ``device="cuda"`` / ``"cuda:N"`` (or TensorFlow's "/GPU:N") places the elements on
    that GPU: TensorFlow's prefetch_to_device copies the next batches while the step
    runs. A RuntimeError when TensorFlow sees no GPU.

    Elements are a tuple of the fields in order ((x, y) for model.fit), the single
    field's tensor when there is one, or a dict with as_dict=True. Keywords are
    dlfeed.Loader's; or pass an existing ``loader`` instead of paths and keywords
    (``dataset(loader=L)``). The elements' tensors share the
    batches' memory (no copy): a batch returns to the loader when TensorFlow drops
    its tensors.

    Samples whose first dimension varies (a TFRecord feature of variable length):
    ``ragged=True`` gives such fields as tf.RaggedTensor [batch, None, ...];
    ``pad=True`` pads each batch's samples to its longest with ``pad_value``. Either
    may name the fields instead (``ragged=["tokens"]``). Without them, a batch whose
    samples differ in length is an error naming the field and the lengths. Given
    either, the loader made from paths also takes files whose samples differ in
    shape (it is made with Loader's ``ragged=True``).
    """
    _options.check_keywords(loader_kwargs, "dlfeed.tf.dataset()")
    tf_device = _tf_device(device)  # checked before any work
    if loader is None:
        if paths is None:
            raise TypeError("dlfeed.tf.dataset(): give the dataset's paths, or loader=")
        # Fields whose samples differ in shape are what ragged=/pad= are for:
        # the loader must accept them too (None: the C++ default, off).
        loader = Loader(paths, ragged=True if ragged or pad else None, **loader_kwargs)
    elif paths is not None:
        # The old spelling dataset(PATHS, loader=L) stays valid when PATHS are L's own.
        given = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
        if given != list(loader.options.paths):
            raise TypeError(f"dlfeed.tf.dataset(): paths {given} are not loader='s {list(loader.options.paths)}; "
                            "give either paths or loader=")
    elif loader_kwargs:
        raise TypeError("give either loader= or Loader keywords, not both")
    ragged_fields = _names(ragged, loader, "ragged")
    pad_fields = _names(pad, loader, "pad")
    both = ragged_fields & pad_fields
    if both:
        raise ValueError(f"field {sorted(both)[0]!r}: choose ragged= or pad=, not both")
    specs = _field_specs(loader, ragged_fields, pad_fields)
    names = loader.field_names
    is_ragged = [isinstance(sp, tf.RaggedTensorSpec) for sp in specs]
    dtypes: List[Any] = []
    for sp, r in zip(specs, is_ragged):
        dtypes += [sp.dtype, tf.int64] if r else [sp.dtype]
    feed = _Feed(loader, ragged_fields, pad_fields, pad_value)

    @tf.autograph.experimental.do_not_convert
    def start(unused: Any) -> Any:
        pass_id, count = tf.numpy_function(feed.start, [unused], [tf.int64, tf.int64], stateful=True,
                                           name="dlfeed_start_epoch")
        return pass_id, count

    @tf.autograph.experimental.do_not_convert
    def one_pass(pass_id: Any, count: Any) -> Any:
        @tf.autograph.experimental.do_not_convert
        def element(_i: Any) -> Any:
            flat = tf.numpy_function(feed.next_batch, [pass_id], dtypes, stateful=True,
                                     name="dlfeed_next_batch")
            tensors = []
            it = iter(flat)
            for s, r in zip(specs, is_ragged):
                t = next(it)
                if r:
                    lengths = next(it)
                    t.set_shape((None, *s.shape[2:]))
                    lengths.set_shape((s.shape[0],))
                    tensors.append(tf.RaggedTensor.from_row_lengths(t, lengths, validate=False))
                else:
                    t.set_shape(s.shape)  # numpy_function's outputs have unknown shapes
                    tensors.append(t)
            return pack(names, tensors, as_dict)

        return tf.data.Dataset.range(count).map(element)

    ds = tf.data.Dataset.from_tensors(np.int64(0)).map(start).flat_map(one_pass)
    # Known length: Keras then knows the steps per epoch.
    ds = ds.apply(tf.data.experimental.assert_cardinality(loader.batches_per_epoch))
    if tf_device is not None:
        ds = ds.apply(tf.data.experimental.prefetch_to_device(tf_device, buffer_size=2))
    return ds


def _tf_device(device: Optional[str]) -> Optional[str]:
    """TensorFlow's name of the GPU ``device`` names ("cuda", "cuda:N", "/GPU:N"), or None."""
    if device is None or str(device).lower() in ("cpu", "/cpu:0"):
        return None
    d = str(device)
    try:
        if d.startswith("cuda"):
            index = int(d.split(":", 1)[1]) if ":" in d else 0
        elif d.upper().startswith("/GPU") or d.upper().startswith("GPU"):
            index = int(d.rsplit(":", 1)[1]) if ":" in d else 0
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"device={device!r}: expected 'cuda', 'cuda:N' or '/GPU:N'") from None
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise RuntimeError(f"device={device!r}: CUDA is not available to TensorFlow (it sees no GPU: "
                           "tf.config.list_physical_devices('GPU') is empty)")
    if index >= len(gpus):
        raise ValueError(f"device={device!r}: TensorFlow sees {len(gpus)} GPU(s)")
    return f"/GPU:{index}"
