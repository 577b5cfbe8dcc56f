# SPDX-License-Identifier: Apache-2.0
"""dlfeed.Loader: the C++ loader's options as keyword arguments, iterable per epoch."""
from __future__ import annotations

import contextlib
import json
import operator
import os
import sys
import threading
import warnings
import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np

from . import _dlfeed, _options
from ._kwargs import LoaderKwargs

# typing.Unpack from Python 3.11; before, only type checkers need it (the
# annotations are strings: `from __future__ import annotations`).
if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

PathLike = Union[str, "os.PathLike[str]"]

#: device=: bytes of copies to the device in flight at once (their own budget: host
#: buffers of batches whose copy has not finished stay out of the pool).
DEFAULT_H2D_BUDGET = 512 << 20
#: device=: batches copied ahead of the one the consumer works on.
DEFAULT_DEVICE_PREFETCH = 2


def _device_feed() -> Any:
    """dlfeed.torch._device, the device feed: device= and pin_memory= need PyTorch,
    so it is imported on their first use (``import dlfeed`` needs no framework);
    None when PyTorch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    from .torch import _device

    return _device


_MPI_SHUTDOWN_REGISTERED = False


def _needs_mpi(what: str) -> None:
    global _MPI_SHUTDOWN_REGISTERED
    if not getattr(_dlfeed, "has_mpi", False):
        raise RuntimeError(f"{what} needs dlfeed built with MPI: with the MPI's development files installed "
                           "(libopenmpi-dev), pip install . -C cmake.define.DLFEED_MPI=ON from the source, or an "
                           "in-tree build; the wheel is built without MPI")
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        # A DataLoader worker (fork or spawn) of a rank: it is no rank of the job, and MPI started in it
        # fails or takes the parent's place.
        raise RuntimeError(f"{what}: this process is a child of the one mpirun or srun started (a DataLoader "
                           "worker, a multiprocessing process): make the loader in the process the launcher "
                           "started (DataLoader(num_workers=0))")
    if not _MPI_SHUTDOWN_REGISTERED:
        import atexit

        # Every rank frees the job caches' windows and ends MPI at exit, together (a collective), not
        # when its loader is collected.
        atexit.register(_dlfeed._mpi_shutdown)
        # A rank that dies of an uncaught exception never reaches its peers' next collective (the
        # training's all-reduce, a loader's, the shutdown above): it aborts the job instead, after its
        # traceback (MPI_Abort), rather than leave them waiting until the walltime. sys.exit(N) is no
        # uncaught exception: it still runs the shutdown.
        sys.excepthook = _abort_job_after(sys.excepthook)
        _MPI_SHUTDOWN_REGISTERED = True


def _abort_job_after(shown: Callable[..., Any]) -> Callable[..., Any]:
    installed_in = os.getpid()  # a child of os.fork() has no MPI of its own to abort

    def hook(kind: Any, value: Any, traceback: Any) -> None:
        try:
            shown(kind, value, traceback)
            sys.stderr.flush()
        finally:
            if os.getpid() == installed_in:
                _dlfeed._mpi_abort(1)

    return hook


def _comm_handle(comm: Any) -> int:
    """mpi_comm=: an mpi4py communicator as its Fortran handle (MPI_Comm_f2c in C++); -1: MPI_COMM_WORLD."""
    if comm is None:
        return -1
    py2f = getattr(comm, "py2f", None)
    if py2f is None:
        raise TypeError(f"mpi_comm={comm!r}: expected an mpi4py communicator (mpi4py.MPI.Comm)")
    handle = int(py2f())
    if handle < 0 or not bool(comm):
        raise ValueError(f"mpi_comm={comm!r}: the null communicator (this rank is in no group of the split)")
    return handle


def _attach_job_cache(o: Any, size: Any, ranks_per_node: Any, folder: Any, comm: Any) -> int:
    """job_cache=: the job's memory as one cache, under mpirun (dlfeed::mpi::JobCache)."""
    _needs_mpi("job_cache=")
    n = _options.byte_count(size, "job_cache")
    return int(_dlfeed._job_cache_attach(o, n, int(ranks_per_node or 0), os.fspath(folder) if folder else "",
                                         _comm_handle(comm)))


def _epoch_number(epoch: Any) -> int:
    """An epoch number as the loader takes it: 0 to 2**64 - 2 (the next one must be one too)."""
    e = operator.index(epoch)
    if not 0 <= e <= 2**64 - 2:
        raise ValueError(f"epoch {epoch!r}: expected an int from 0 to {2**64 - 2}")
    return e


def _shape_of(key: str, shape: Any) -> List[int]:
    """shapes=' value for `key` as a list of ints: a sequence of ints (a str, a float or a bool is none)."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"shapes: field '{key}': {shape!r}: expected a sequence of ints, e.g. (3, 224, 224)")
    out = []
    for d in shape:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise TypeError(f"shapes: field '{key}': {tuple(shape)!r}: expected ints, found {d!r}")
        out.append(int(d.__index__()))
    return out


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
    are listed below and in docs/python.md, and typed for checkers and IDEs by
    :class:`dlfeed.LoaderKwargs` (``**options: Unpack[LoaderKwargs]``). ``for batch in loader`` runs one
    epoch (the next one: 0, 1, 2... or the epoch of a restored state); each batch is a
    :class:`dlfeed.Batch` whose ``batch["x"]`` is a numpy array in dlfeed's memory.

    Batches you keep alive count against ``memory_budget`` (not against the
    read-ahead of ``prefetch``): holding a few does not slow the loader; holding
    so many that the budget is full makes it read one batch at a time; it never
    waits forever.

    GPU (docs/python.md): ``device="cuda"`` (or ``"cuda:N"``) yields batches on the
    device (:class:`dlfeed.torch._device.DeviceBatch`: {field: torch CUDA tensor}, each a
    DLPack producer), copied on a stream of their own from page-locked pool buffers
    while the consumer works on the previous batch; ``h2d_budget`` bounds the bytes
    of copies in flight, ``device_prefetch`` the batches copied ahead.
    ``pin_memory=True`` registers the pool's buffers page-locked once each (no
    copy); without CUDA it warns and gives ordinary batches. ``pin_memory`` may
    also be a ``_dlfeed.page_locked_allocator(register, unregister)`` of your own.

    ``overlap_epochs=True`` reads epoch e + 1 as soon as epoch e is all read, so the
    first batches of the next ``iter_epoch(e + 1)`` are ready (the default with
    ``device=``; off otherwise, since fork() children refuse a process whose
    pipeline still runs between epochs). ``iter_epochs()`` iterates epochs on end.
    """

    def __init__(self, paths: Union[PathLike, Iterable[PathLike]], *, device: Any = None, pin_memory: Any = False,
                 h2d_budget: int = DEFAULT_H2D_BUDGET,
                 device_prefetch: int = DEFAULT_DEVICE_PREFETCH, overlap_epochs: Optional[bool] = None,
                 **options: Unpack[LoaderKwargs]) -> None:
        # The keywords are _options.KEYWORDS, typed by LoaderKwargs; a name that is
        # not one is a TypeError naming the nearest (_options.check_keywords).
        own_pinned = isinstance(pin_memory, _dlfeed.PinnedAllocator)
        feed: Any = _device_feed() if device is not None or (pin_memory and not own_pinned) else None
        if device is not None and feed is None:
            raise RuntimeError("device='cuda' needs PyTorch (pip install torch with CUDA)")
        # A clear error without CUDA, before any work.
        self._device = feed.cuda_device(device) if device is not None else None
        self._h2d_budget = int(h2d_budget)
        self._device_prefetch = int(device_prefetch)
        self._copier: Any = None  # the device feed's DeviceCopier (made on first use)
        self._feed: Any = None  # a weak reference to the running device feed (dlfeed.torch._device.loader_feed)
        self._feeder: Any = None  # the device feed's Feeder thread (made on first use)
        o = _options.build_options(_paths(paths), options)
        self._pinned = None
        if own_pinned:
            self._pinned = pin_memory  # your own register/unregister pair (_dlfeed.page_locked_allocator)
            o.buffer_allocator = pin_memory
        elif pin_memory or self._device is not None:
            if feed is None:
                warnings.warn("dlfeed.Loader: pin_memory=True ignored: CUDA is not available; batches are in "
                              "ordinary (pageable) memory", RuntimeWarning, stacklevel=2)
            else:
                self._pinned = feed.pinned_allocator("dlfeed.Loader")
            if self._pinned is not None:
                o.buffer_allocator = self._pinned
        shapes: Optional[Mapping[str, Sequence[int]]] = options.get("shapes")

        reshape: List[Optional[List[int]]] = []
        if shapes:
            # "x=*_data.npy": field x; "x=y" (no '*'): a plain name
            names = [f.split("=", 1)[0] if "*" in f.partition("=")[2] else f for f in o.fields] if o.fields else None
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
                view = _shape_of(key, shape)
                if min(view, default=0) < 0:  # before any indexing or collective
                    raise _dlfeed.InvalidArgumentError(
                        f"shapes: field '{key}': sample shape {tuple(view)} has a negative dimension")
                reshape[idx] = view
            # Named fields: the C++ loader reads a TFRecord feature in that shape (its bytes straight into
            # the batch); the view above is then the shape the samples already have.
            if names is not None:
                o.field_shapes = {key: tuple(_shape_of(key, shape)) for key, shape in shapes.items()}
            elif len(shapes) == 1 and next(iter(shapes)) in (o.format.feature, o.format.name, "data"):
                o.field_shapes = {k: tuple(_shape_of(k, s)) for k, s in shapes.items()}  # the one field, by its name

        self._job_cache: Optional[int] = None
        if options.get("job_cache") is not None:  # a rank of the MPI job too (mpi=True is implied)
            self._job_cache = _attach_job_cache(o, options.get("job_cache"), options.get("job_cache_ranks_per_node"),
                                                options.get("job_cache_folder"), options.get("mpi_comm"))
        elif options.get("mpi") is not None and not isinstance(options.get("mpi"), bool):
            raise TypeError(f"mpi={options.get('mpi')!r}: expected True or False")
        elif options.get("mpi_comm") is not None and options.get("mpi") is False:
            raise ValueError("mpi_comm= with mpi=False: the communicator makes the loader a rank of an MPI job")
        elif options.get("mpi") or options.get("mpi_comm") is not None:
            _needs_mpi("mpi=True")
            _dlfeed._mpi_attach(o, _comm_handle(options.get("mpi_comm")))
        self._core = _dlfeed.Loader(o, reshape)
        self._next_epoch = 0
        self._restored = False  # a restore() that no start took yet
        # Counts the starts of epochs (and restores): an iterator of an earlier one is superseded.
        self._generation = 0
        # Held by a start (and the iterator it makes) and by each next(): another thread's start falls
        # between two batches, never between an iterator's check of its generation and its batch.
        self._order_lock = threading.Lock()
        _fresh_lock_after_fork(self)
        # The next epoch is read while this one's last batches are consumed (docs/python.md);
        # by default with device= only (a pipeline running between epochs refuses fork() children).
        self._core.set_overlap_epochs(self._device is not None if overlap_epochs is None else bool(overlap_epochs))

    # -- iteration ---------------------------------------------------------
    def __iter__(self) -> "EpochIterator":
        """One epoch: the next one (or the epoch of a restore()d state; when the state was taken at
        its epoch's end, the next epoch, whole)."""
        with self._order_lock:
            it = self._start(_epoch_number(self._next_epoch), next_if_spent=True)
        if self._device is not None:
            return self._device_epoch(it)  # type: ignore[return-value]
        return it

    def _start(self, epoch: int, next_if_spent: bool = False) -> "EpochIterator":
        """Starts `epoch` (the caller holds _order_lock). With next_if_spent, a restore()d state that
        left nothing of its epoch (taken after the epoch's last batch: a checkpoint at an epoch's end)
        starts the next epoch instead of an empty pass, as the uninterrupted loader would run next."""
        self._started()
        self._core.start_epoch(epoch)  # one that fails keeps a restore pending for the next start
        restored, self._restored = self._restored, False
        if next_if_spent and restored and self._core.batches_left == 0 and self._core.batches_per_epoch > 0:
            epoch = _epoch_number(epoch + 1)
            self._next_epoch = epoch
            self._started()  # takes the spent epoch's end
            self._core.start_epoch(epoch)
        return EpochIterator(self, int(epoch))

    def _started(self) -> int:
        self._take_end()
        self._generation += 1
        return self._generation

    def _take_end(self) -> None:
        """Takes the running epoch's end when all its batches were taken but not its end (a caller
        that took exactly len(loader) batches): with overlap_epochs, a start of the next epoch then
        keeps what was read ahead of it. Taken here, not with the last batch, whose hand-over would
        otherwise wait for the next epoch's order."""
        if self._core.batches_left == 0 and self._core.epoch_pending_end:
            with contextlib.suppress(Exception):  # an error of the epoch given up is not the next one's
                self._core.next()

    def iter_epoch(self, epoch: int) -> Any:
        """Starts ``epoch`` (from its beginning, or from a restored position in it). An
        iterator of an epoch started earlier on this loader raises once this one starts."""
        epoch = _epoch_number(epoch)
        with self._order_lock:
            it = self._start(epoch)
        if self._device is not None:
            return self._device_epoch(it)
        return it

    @property
    def device(self) -> Any:
        """The torch.device batches are delivered to, or None (host memory)."""
        return self._device

    @property
    def pinned(self) -> bool:
        """Whether the batch buffers are registered page-locked (pin_memory / device)."""
        return self._pinned is not None

    def pin_stats(self) -> Dict[str, int]:
        """Pool buffers registered page-locked so far (each once), their bytes, failures."""
        p = self._pinned
        if p is None:
            return {"registered": 0, "registered_bytes": 0, "failures": 0, "unregistered": 0}
        return {"registered": p.registered, "registered_bytes": p.registered_bytes, "failures": p.failures,
                "unregistered": p.unregistered, "last_error": p.last_error}

    def h2d_stats(self) -> Dict[str, Any]:
        """The copies to the device so far (all epochs): count, bytes, GB/s as timed on the device."""
        return self._copier.stats() if self._copier is not None else {}

    def iter_epochs(self, first: Optional[int] = None, count: Optional[int] = None) -> Iterator[Any]:
        """The batches of ``count`` epochs (None: without end) from ``first`` (None: the
        next one, as ``iter(loader)`` runs it: after a restore at an epoch's end, the epoch
        after; a ``first`` given runs as ``iter_epoch`` runs it) as one stream: each epoch's
        reads start while the last one's batches are consumed (overlap_epochs is turned on),
        and with ``device=`` the copies go on across the epochs' ends. ``batch.epoch`` says
        which epoch a batch is of."""
        start = _epoch_number(self._next_epoch if first is None else first)
        stop = None if count is None else start + operator.index(count)
        if stop is not None:
            _epoch_number(max(start, stop - 1))  # the last epoch asked for is one too
        self._core.set_overlap_epochs(True)

        def epochs() -> Iterator[Any]:
            e, end = start, stop
            while end is None or e < end:
                with self._order_lock:
                    it = self._start(_epoch_number(e), next_if_spent=first is None and e == start)
                if it.epoch != e:  # a spent restored epoch gave way to the next: still `count` epochs
                    e, end = it.epoch, None if end is None else end + 1
                yield from it
                e += 1

        if self._device is not None:
            return self._device_epoch(epochs())
        return epochs()

    def _device_epoch(self, host: Iterable[Any]) -> Iterator[Any]:
        # The copies are issued by a feeder thread (dlfeed.torch._device.DeviceFeed); the host
        # batches are still taken on the consumer's thread, so the counters see its steps and waits.
        from .torch import _device

        return _device.loader_feed(self, host)

    def _iter_epoch_at(self, epoch: int, position: int) -> "EpochIterator":
        """``epoch`` from this rank's sample ``position`` on (a multiple of batch_size)."""
        with self._order_lock:
            self._restored = False
            self._started()
            self._core.start_epoch(int(epoch), int(position))
            return EpochIterator(self, int(epoch))

    def __len__(self) -> int:
        return self._core.batches_per_epoch

    @property
    def epoch(self) -> int:
        """The epoch the next ``for batch in loader`` runs."""
        return self._next_epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._next_epoch = _epoch_number(value)

    # -- resume ------------------------------------------------------------
    def state(self) -> bytes:
        """A resume point after the batches delivered so far (a few dozen bytes)."""
        return self._core.state()

    def restore(self, state: bytes) -> None:
        """The next iteration continues where ``state`` was taken (same options needed)."""
        with self._order_lock:
            self._started()  # the epoch running, if any, is given up
            self._core.restore(bytes(state))
            self._next_epoch = int(_dlfeed.decode_state(bytes(state))["epoch"])
            self._restored = True

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
        per-epoch AU, samples/s and MB/s (the JSON of docs/counters.md), and ``h2d``:
        the copies to the device (device=) that were timed (one in
        ``dlfeed.torch._device.DEFAULT_TIME_EVERY``; h2d_stats() counts them all): copies,
        seconds (as the device timed them), bytes and GB/s."""
        c = json.loads(self._core.counters_json())
        ns = c["counters"].get("h2d_ns", {})
        nbytes = c["counters"].get("h2d_bytes", {}).get("value", 0)
        secs = ns.get("value", 0) / 1e9
        c["h2d"] = {"copies": ns.get("count", 0), "seconds": secs, "bytes": nbytes,
                    "gb_per_s": nbytes / secs / 1e9 if secs else 0.0}
        return c

    def summary(self) -> str:
        """The human summary table `dlfeed run` prints."""
        return self._core.summary_table()

    def reset_counters(self) -> None:
        self._core.reset_counters()

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Marks a training step's compute, for AU (the share of each epoch after its first step spent
        in compute; docs/counters.md)::

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
        if not self.options.trace.enabled:
            # The C++ message names every way to enable tracing (the command line's
            # too); a Python caller gets the Python one. 9: FAILED_PRECONDITION.
            _dlfeed._raise_status(9, f"{os.fspath(path)}: no trace to write: this loader was made without "
                                     "trace=True (dlfeed.Loader(..., trace=True) records the trace events)")
        self._core.write_trace(os.fspath(path), format)

    def job_cache_stats(self) -> Optional[Dict[str, Any]]:
        """This rank's job cache counters (bytes from the files, the rank's own part, its node, other
        nodes; docs/distributed.md), or None without ``job_cache=``."""
        return None if self._job_cache is None else dict(_dlfeed._job_cache_stats(self._job_cache))

    def close(self) -> None:
        """Stops the pipeline now (batches already handed out stay valid)."""
        if self._feed is not None or self._feeder is not None or self._copier is not None:
            from .torch import _device

            _device.close_loader(self)  # device=: its feed and feeder thread stop, copies in flight finish
        self._core.close()
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether close() was called (iterating then raises ValueError)."""
        return getattr(self, "_closed", False)

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        o = self.options
        return (f"<dlfeed.Loader {self.num_samples} samples, fields {self.field_names}, batch_size "
                f"{o.batch_size}, strategy {o.order.strategy}, rank {o.order.rank}/{o.order.world_size}>")


_LIVE_LOADERS: "weakref.WeakSet[Loader]" = weakref.WeakSet()


def _fresh_locks_in_child() -> None:
    for loader in list(_LIVE_LOADERS):
        loader._order_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    # A child of fork() gets unlocked _order_locks (a thread of the parent may have held one), so that
    # using a loader there raises its "created before fork()" error, not a hang.
    os.register_at_fork(after_in_child=_fresh_locks_in_child)


def _fresh_lock_after_fork(loader: "Loader") -> None:
    _LIVE_LOADERS.add(loader)


class EpochIterator:
    """The batches of one epoch (not a generator: it keeps no reference to the
    batch it returned, so only the caller decides how long a batch lives)."""

    def __init__(self, loader: Loader, epoch: int) -> None:
        self._loader = loader
        self.epoch = epoch
        self._done = False
        self._generation = loader._generation
        self._left = loader._core.batches_left  # made right after its start: counted down per batch

    def __iter__(self) -> "EpochIterator":
        return self

    def __length_hint__(self) -> int:
        """Batches still to come in this epoch (fewer than len(loader) after a
        mid-epoch restore): operator.length_hint(iter(loader))."""
        return 0 if self._done else self._loader._core.batches_left

    def __next__(self) -> "_dlfeed.Batch":
        if self._done:
            raise StopIteration
        loader = self._loader
        with loader._order_lock:
            if self._generation != loader._generation:
                # Its batches would be the newer epoch's, taken from that epoch's own iterator.
                raise RuntimeError(f"dlfeed: this iterator of epoch {self.epoch} was superseded: another epoch was "
                                   "started on its loader since (iter_epoch, iter(loader) or restore); iterate one "
                                   "epoch at a time, or use a loader per stream")
            batch = loader._core.next()
            if batch is not None:
                self._left -= 1
            # The epoch's last batch taken (or its end seen): the next `for batch in loader` runs the next
            # epoch, also when the caller took exactly len(loader) batches and never asked for the end
            # (the next start takes that end, _take_end, so that the epoch read ahead is kept).
            if (batch is None or self._left <= 0) and loader._next_epoch <= self.epoch:
                loader._next_epoch = self.epoch + 1
        if batch is None:
            self._done = True
            raise StopIteration
        return batch

    def next(self) -> Optional["_dlfeed.Batch"]:
        """The next batch or None at the end of the epoch."""
        try:
            return self.__next__()
        except StopIteration:
            return None


Loader.__doc__ = ((Loader.__doc__ or "") + "\n    Keywords (field of LoaderOptions: what it does):\n\n"
                   + _options.keyword_help() + "\n")
