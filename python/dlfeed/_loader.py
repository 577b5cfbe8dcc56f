"""dlfeed.Loader: the C++ loader's options as keyword arguments, iterable per epoch."""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _dlfeed, _options

PathLike = Union[str, "os.PathLike[str]"]


def _paths(paths: Union[PathLike, Iterable[PathLike]]) -> List[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fsdecode(paths)]
    out = [os.fsdecode(p) for p in paths]
    if not out:
        raise ValueError("paths: give at least one file or folder")
    return out


class Loader:
    """Batches from HDF5, NPZ/NPY and TFRecord files, read and decoded by C++ threads.

    Every keyword but ``shapes`` sets a field of the C++ ``dlfeed::LoaderOptions``
    (None keeps the C++ default); the keywords and their fields (dlfeed._options.KEYWORDS)
    are listed below and in docs/python.md. ``for batch in loader`` runs one
    epoch (the next one: 0, 1, 2... or the epoch of a restored state); each batch is a
    :class:`dlfeed.Batch` whose ``batch["x"]`` is a numpy array in dlfeed's memory.

    Batches you keep alive count against ``memory_budget`` (not against the
    read-ahead of ``prefetch``): keeping many only makes the loader read one batch
    at a time once the budget is full; it never waits forever.
    """

    def __init__(self, paths: Union[PathLike, Iterable[PathLike]], **options: Any) -> None:
        # The keywords are _options.KEYWORDS (the signature below lists them for help()).
        o = _options.build_options(_paths(paths), options)
        shapes: Optional[Mapping[str, Sequence[int]]] = options.get("shapes")

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

    def stats(self) -> "_dlfeed.LoaderStats":
        """Totals since the loader was made: attributes (stats().bytes_read), or
        as a dict (stats()["bytes_read"], to_dict())."""
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
        """Writes the trace: "chrome" (alias "perfetto") or "dftracer" (alias "pfw") lines; a
        path ending in ".gz" is written gzip-compressed (DFTracer's tools want ``.pfw.gz``).
        Needs ``trace=True``: without it, raises dlfeed.InvalidArgumentError (a ValueError)
        saying so, rather than writing an empty trace."""
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


Loader.__init__.__signature__ = _options.signature(Union[PathLike, Iterable[PathLike]])  # type: ignore[attr-defined]
Loader.__doc__ = (Loader.__doc__ or "") + "\n    Keywords (field of LoaderOptions: what it does):\n\n" + _options.keyword_help() + "\n"
