"""dlfeed.Loader: the C++ loader's options as keyword arguments, iterable per epoch."""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _dlfeed

PathLike = Union[str, "os.PathLike[str]"]


def _paths(paths: Union[PathLike, Iterable[PathLike]]) -> List[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fsdecode(paths)]
    out = [os.fsdecode(p) for p in paths]
    if not out:
        raise ValueError("paths: give at least one file or folder")
    return out


def _dtype_name(dt: Any) -> str:
    if isinstance(dt, str):
        return dt
    return np.dtype(dt).str  # numpy types, np.dtype objects: '<f4'


def _set(obj: Any, attr: str, value: Any) -> None:
    if value is not None:
        setattr(obj, attr, value)


class Loader:
    """Batches from HDF5, NPZ/NPY and TFRecord files, read and decoded by C++ threads.

    Every keyword is an option of the C++ ``dlfeed::LoaderOptions`` (None keeps the
    C++ default); see docs/python.md for the table. ``for batch in loader`` runs one
    epoch (the next one: 0, 1, 2... or the epoch of a restored state); each batch is a
    :class:`dlfeed.Batch` whose ``batch["x"]`` is a numpy array in dlfeed's memory.

    Batches you keep alive count against ``memory_budget`` (not against the
    read-ahead of ``prefetch``): keeping many only makes the loader read one batch
    at a time once the budget is full; it never waits forever.
    """

    def __init__(
        self,
        paths: Union[PathLike, Iterable[PathLike]],
        *,
        fields: Union[str, Sequence[str], None] = None,
        batch_size: Optional[int] = None,
        drop_last_batch: Optional[bool] = None,
        ragged: Optional[bool] = None,
        # order (OrderSpec)
        strategy: Optional[str] = None,
        seed: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shard_drop_last: Optional[bool] = None,
        buffer_size: Optional[int] = None,
        block_size: Optional[int] = None,
        window: Optional[int] = None,
        indices: Optional[Sequence[int]] = None,
        # format (FormatOptions)
        format: Optional[str] = None,
        layout: Optional[str] = None,
        axis: Optional[str] = None,
        name: Optional[str] = None,
        feature: Optional[str] = None,
        feature_dtype: Any = None,
        feature_shape: Optional[Sequence[int]] = None,
        verify_crc: Optional[bool] = None,
        use_index_files: Optional[bool] = None,
        write_index_files: Optional[bool] = None,
        index_dir: Optional[str] = None,
        # I/O (IoOptions) and the pipeline
        io: Optional[str] = None,
        queue_depth: Optional[int] = None,
        max_bytes_in_flight: Optional[int] = None,
        io_threads: Optional[int] = None,
        io_engines: Optional[int] = None,
        io_spread_always: Optional[bool] = None,
        direct: Optional[bool] = None,
        max_open_files: Optional[int] = None,
        prefetch: Optional[str] = None,
        max_gap: Optional[int] = None,
        max_read: Optional[int] = None,
        coalesce: Optional[bool] = None,
        fadvise_willneed: Optional[bool] = None,
        memory_budget: Optional[int] = None,
        threads: Optional[int] = None,
        trace: Optional[bool] = None,
        trace_max_events: Optional[int] = None,
        trace_io_sample: Optional[int] = None,
        stage_dir: Optional[str] = None,
        stage_limit: Optional[int] = None,
        # Python only
        shapes: Optional[Mapping[str, Sequence[int]]] = None,
    ) -> None:
        o = _dlfeed.LoaderOptions()
        o.paths = _paths(paths)
        if isinstance(fields, str):
            fields = [fields]
        if fields is not None:
            o.fields = list(fields)
        _set(o, "batch_size", batch_size)
        _set(o, "drop_last_batch", drop_last_batch)
        _set(o, "ragged", ragged)
        _set(o, "max_open_files", max_open_files)
        _set(o, "prefetch", prefetch)
        _set(o, "fadvise_willneed", fadvise_willneed)
        _set(o, "memory_budget", memory_budget)
        _set(o, "threads", threads)
        _set(o, "trace", trace)
        _set(o, "trace_max_events", trace_max_events)
        _set(o, "trace_io_sample", trace_io_sample)
        _set(o, "stage_dir", None if stage_dir is None else os.fspath(stage_dir))
        _set(o, "stage_limit", stage_limit)

        order = o.order
        if strategy is not None and strategy not in _dlfeed.strategy_names():
            # The C++ registry says NotFound; for a Python caller it is a bad argument.
            raise _dlfeed.InvalidArgumentError(
                f"unknown order strategy {strategy!r} (known: {', '.join(_dlfeed.strategy_names())})")
        _set(order, "strategy", strategy)
        _set(order, "seed", seed)
        _set(order, "rank", rank)
        _set(order, "world_size", world_size)
        _set(order, "drop_last", shard_drop_last)
        _set(order, "buffer_size", buffer_size)
        _set(order, "block_size", block_size)
        _set(order, "window", window)
        _set(order, "indices", indices)

        fmt = o.format
        _set(fmt, "format", format)
        if layout is not None:
            # "dlio": NPY/NPZ samples on the last axis, as DLIO's generator writes them.
            layout_axis = {"dlio": "last", "plain": "first", "auto": "auto"}.get(layout)
            if layout_axis is None:
                raise _dlfeed.InvalidArgumentError(f"layout {layout!r}: expected 'dlio', 'plain' or 'auto'")
            if axis is not None and axis != layout_axis:
                raise _dlfeed.InvalidArgumentError(
                    f"layout={layout!r} reads NPY/NPZ samples on the {layout_axis} axis; axis={axis!r} contradicts it")
            axis = layout_axis
        _set(fmt, "axis", axis)
        _set(fmt, "name", name)
        _set(fmt, "feature", feature)
        _set(fmt, "feature_dtype", None if feature_dtype is None else _dtype_name(feature_dtype))
        if feature_shape is not None:
            fmt.feature_shape = tuple(int(d) for d in feature_shape)
        _set(fmt, "verify_crc", verify_crc)
        _set(fmt, "use_index_files", use_index_files)
        _set(fmt, "write_index_files", write_index_files)
        _set(fmt, "index_dir", index_dir)

        _set(o.io, "kind", io)
        _set(o.io, "queue_depth", queue_depth)
        _set(o.io, "max_bytes_in_flight", max_bytes_in_flight)
        _set(o.io, "threads", io_threads)
        _set(o, "io_engines", io_engines)
        _set(o, "io_spread_always", io_spread_always)
        _set(o.io, "direct", direct)
        _set(o.coalesce, "max_gap", max_gap)
        _set(o.coalesce, "max_read", max_read)
        _set(o.coalesce, "enabled", coalesce)

        reshape: List[Optional[List[int]]] = []
        if shapes:
            names = list(o.fields) if o.fields else None
            for key, shape in shapes.items():
                if names is None:
                    if len(shapes) != 1:
                        raise ValueError("shapes: give fields=... to reshape more than one field")
                    idx = 0
                elif key in names:
                    idx = names.index(key)
                else:
                    raise ValueError(f"shapes: no field {key!r} among {names}")
                while len(reshape) <= idx:
                    reshape.append(None)
                reshape[idx] = [int(d) for d in shape]

        self._core = _dlfeed.Loader(o, reshape)
        self._next_epoch = 0

    # -- iteration ---------------------------------------------------------
    def __iter__(self) -> "EpochIterator":
        """One epoch: the next one (or the epoch of a restore()d state)."""
        return self.iter_epoch(self._next_epoch)

    def iter_epoch(self, epoch: int) -> "EpochIterator":
        """Starts ``epoch`` (from its beginning, or from a restored position in it)."""
        self._core.start_epoch(int(epoch))
        return EpochIterator(self, int(epoch))

    def __len__(self) -> int:
        return self._core.batches_per_epoch

    @property
    def epoch(self) -> int:
        """The epoch the next ``for batch in loader`` runs."""
        return self._next_epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._next_epoch = int(value)

    # -- resume ------------------------------------------------------------
    def state(self) -> bytes:
        """A resume point after the batches delivered so far (a few dozen bytes)."""
        return self._core.state()

    def restore(self, state: bytes) -> None:
        """The next iteration continues where ``state`` was taken (same options needed)."""
        self._core.restore(bytes(state))
        self._next_epoch = int(_dlfeed.decode_state(bytes(state))["epoch"])

    # -- information -------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return self._core.num_samples

    @property
    def samples_per_epoch(self) -> int:
        return self._core.samples_per_epoch

    @property
    def batches_per_epoch(self) -> int:
        return self._core.batches_per_epoch

    @property
    def field_names(self) -> List[str]:
        return list(self._core.field_names)

    @property
    def options(self) -> "_dlfeed.LoaderOptions":
        """A copy of the C++ options the loader was made with."""
        return self._core.options

    def field_specs(self) -> List[Tuple[str, np.dtype, Optional[Tuple[Optional[int], ...]]]]:
        """Per field: (name, numpy dtype, sample shape; None marks dims that vary or are
        known only after decode; None for the whole shape when even the rank varies)."""
        return [(n, np.dtype(d), s) for n, d, s in self._core.field_specs()]

    def stats(self) -> Dict[str, Any]:
        return self._core.stats()

    # -- counters (docs/counters.md) ---------------------------------------
    def counters(self) -> Dict[str, Any]:
        """A snapshot of the built-in counters: per-stage latencies, bytes,
        per-epoch AU, samples/s and MB/s (the JSON of docs/counters.md)."""
        return json.loads(self._core.counters_json())

    def summary(self) -> str:
        """The human summary table `dlfeed run` prints."""
        return self._core.summary_table()

    def reset_counters(self) -> None:
        self._core.reset_counters()

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Marks a training step's compute, for AU = compute / (compute + stall)::

            for batch in loader:
                with loader.compute():
                    loss = step(batch)
        """
        t0, io0 = self._core.compute_begin()
        try:
            yield
        finally:
            self._core.compute_end(t0, io0)

    def mark_step(self) -> None:
        """Ends a training step explicitly (by default every next() does)."""
        self._core.mark_step()

    def write_trace(self, path: PathLike, format: str = "chrome") -> None:
        """Writes the trace (needs ``trace=True``): "chrome" (Perfetto) or "dftracer" lines."""
        self._core.write_trace(os.fspath(path), format)

    def close(self) -> None:
        """Stops the pipeline now (batches already handed out stay valid)."""
        self._core.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        o = self.options
        return (f"<dlfeed.Loader {self.num_samples} samples, fields {self.field_names}, batch_size "
                f"{o.batch_size}, strategy {o.order.strategy}, rank {o.order.rank}/{o.order.world_size}>")


class EpochIterator:
    """The batches of one epoch (not a generator: it keeps no reference to the
    batch it returned, so only the caller decides how long a batch lives)."""

    def __init__(self, loader: Loader, epoch: int) -> None:
        self._loader = loader
        self.epoch = epoch
        self._done = False

    def __iter__(self) -> "EpochIterator":
        return self

    def __length_hint__(self) -> int:
        """Batches still to come in this epoch (fewer than len(loader) after a
        mid-epoch restore): operator.length_hint(iter(loader))."""
        return 0 if self._done else self._loader._core.batches_left

    def __next__(self) -> "_dlfeed.Batch":
        if self._done:
            raise StopIteration
        batch = self._loader._core.next()
        if batch is None:
            self._done = True
            if self._loader._next_epoch <= self.epoch:
                self._loader._next_epoch = self.epoch + 1
            raise StopIteration
        return batch

    def next(self) -> Optional["_dlfeed.Batch"]:
        """The next batch or None at the end of the epoch."""
        try:
            return self.__next__()
        except StopIteration:
            return None
