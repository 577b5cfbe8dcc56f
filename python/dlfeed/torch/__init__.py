# SPDX-License-Identifier: Apache-2.0
"""PyTorch adaptor: an IterableDataset that yields torch tensors in dlfeed's memory.

    ds = dlfeed.torch.Dataset("data/train", fields=["x", "y"], batch_size=64,
                              strategy="global_shuffle", seed=1)
    for epoch in range(3):
        for x, y in ds:          # torch tensors, zero copy (DLPack), one epoch per `for`
            ...

No DataLoader worker processes are needed: dlfeed's C++ threads read and decode.
Rank and world size come from torch.distributed when it is initialised (or pass
them). Wrapped in a DataLoader(ds, batch_size=None, num_workers=K) anyway, each
worker reads its own contiguous run of this rank's batches (the batches a
direct iteration gives, whatever K: drop_last_batch drops only the rank's last
partial batch, and len(DataLoader) is right), no sample is read twice, and each
DataLoader iteration is the next epoch (a file-backed counter the workers share;
see _EpochRecord).

With device="cuda" the batches are copied to the GPU by the loader's device feed
(dlfeed.torch._device: a copy stream, its feeder thread, page-locked pool buffers).
"""
from __future__ import annotations

import collections
import fcntl
import multiprocessing.context
import os
import struct
import sys
import tempfile
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
import torch.utils.data

from .. import _dlfeed, _options
from .._kwargs import TorchDatasetKwargs
from .._loader import Loader
from .._structure import pack
from . import _device

# typing.Unpack from Python 3.11; before, only type checkers need it (the
# annotations are strings: `from __future__ import annotations`).
if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Dataset", "to_torch"]

_IDS_KEY = "sample_ids"  # as_dict's key for dlfeed's sample ids (a field of that name is refused)


def _non_native(a: Any) -> bool:
    first = a[0] if isinstance(a, list) and a else a
    return isinstance(first, np.ndarray) and not first.dtype.isnative


def _native(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("="))


def to_torch(batch: Any, index: Union[int, str]) -> Any:
    """Field ``index`` of a dlfeed.Batch as a torch tensor sharing its memory (a list of
    tensors for a ragged field). A big-endian field (torch has no such type) is a copy in
    the machine's byte order."""
    t = batch.tensor(index)
    try:
        if isinstance(t, list):
            return [torch.from_dlpack(s) for s in t]
        return torch.from_dlpack(t)
    except BufferError:  # a big-endian field: DLPack has no such type
        a = batch[index]
        if not _non_native(a):
            raise
        if isinstance(a, list):
            return [torch.from_numpy(_native(s)) for s in a]
        return torch.from_numpy(_native(a))


def _distributed() -> Optional[tuple]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _remove(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # not a forked worker's copy being collected
        try:
            os.unlink(path)
        except OSError:
            pass


def _boottime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def _process_start_ns() -> Optional[int]:
    """When this process began (fork or clone), on CLOCK_BOOTTIME, rounded
    down to the kernel's tick; None where /proc does not say."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _began_before(t_ns: int) -> bool:
    """Whether this process began before t_ns (CLOCK_BOOTTIME): a tick
    earlier at least, as /proc counts in ticks."""
    start = _process_start_ns()
    return start is not None and start + 1_000_000_000 // os.sysconf("SC_CLK_TCK") <= t_ns


class _EpochRecord:
    """The epoch counter of a Dataset, shared with its DataLoader workers' copies.

    Each DataLoader iteration gives its workers fresh copies of the dataset
    (fork copies memory, spawn unpickles), so a counter kept in the dataset
    would restart in every epoch's workers. This one lives in a small file the
    creating process makes (and removes): workers open it by path, whatever
    the start method, and update it under flock(2) on their own descriptor.

    Fields (int64): the epoch the next iteration runs; then the generation
    now running in workers: its key (the DataLoader iterator's base seed, the
    same in all its workers and drawn anew per iteration, and how many
    iterations the worker process made, for persistent workers whose seed
    stays), its epoch, how many workers joined it, whether it is valid, and
    its number of workers; then when set_next() was last called.
    """

    _FORMAT = "<8q"
    _SIZE = struct.calcsize(_FORMAT)
    NEXT, KEY_SEED, KEY_ITER, GEN_EPOCH, JOINED, VALID, WORKERS, SET_AT = range(8)

    def __init__(self, epoch: int = 0) -> None:
        fd, self.path = tempfile.mkstemp(prefix="dlfeed-torch-epoch-")
        try:
            os.write(fd, struct.pack(self._FORMAT, epoch, 0, 0, 0, 0, 0, 0, 0))
        finally:
            os.close(fd)
        weakref.finalize(self, _remove, self.path, os.getpid())
        self._fd: Optional[int] = None
        self._pid: Optional[int] = None

    def __getstate__(self) -> Dict[str, Any]:
        # Shared with a process being started (DataLoader's spawn/forkserver
        # workers); any other copy (deepcopy, pickle.dumps) gets its own counter.
        if multiprocessing.context.get_spawning_popen() is not None:
            return {"path": self.path}
        return {"epoch": self.update(lambda v: v[self.NEXT])}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        if "path" in state and os.path.exists(state["path"]):
            self.path = state["path"]
            self._fd = None
            self._pid = None
        else:
            self.__init__(state.get("epoch", 0))  # type: ignore[misc]

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass

    def update(self, change: Callable[[List[int]], Any]) -> Any:
        """Calls change(fields) under the lock; writes the fields back."""
        if self._pid != os.getpid():  # first use in this process: an own descriptor, so flock excludes
            self._fd = os.open(self.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            self._pid = os.getpid()
        fd = self._fd
        assert fd is not None
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            fields = list(struct.unpack(self._FORMAT, os.pread(fd, self._SIZE, 0)))
            result = change(fields)
            os.pwrite(fd, struct.pack(self._FORMAT, *fields), 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return result

    @property
    def next_epoch(self) -> int:
        return self.update(lambda v: v[self.NEXT])

    def set_next(self, epoch: int) -> None:
        """The next iteration, direct or in workers, runs `epoch`."""
        def change(v: List[int]) -> None:
            v[self.NEXT] = epoch
            v[self.VALID] = 0
            v[self.SET_AT] = _boottime_ns()

        self.update(change)

    def join(self, seed: int, iteration: int, num_workers: int) -> int:
        """The epoch of the worker generation this worker belongs to: a new
        generation (taking the next epoch) when the key differs from the one
        running, or when all of its workers have joined already or it had
        another number of workers (a DataLoader made again with the same
        seeded generator). A persistent worker that starts late, after the
        others went on to a later iteration, joins an iteration already given
        up (its batches are dropped by the DataLoader): it takes no epoch."""
        def change(v: List[int]) -> int:
            if (v[self.VALID] and v[self.KEY_SEED] == seed and iteration < v[self.KEY_ITER]
                    and v[self.WORKERS] == num_workers and v[self.JOINED] < num_workers):
                # A given-up iteration of persistent workers whose later one still waits for this worker:
                # no epoch of its own. (A new DataLoader's workers, iteration 0 again, find the last
                # generation whole and start a new one.)
                return v[self.GEN_EPOCH]
            key = v[self.KEY_SEED] == seed and v[self.KEY_ITER] == iteration and v[self.WORKERS] == num_workers
            # set_epoch() during an iteration leaves it to its own workers still starting (a slow
            # worker_init_fn, spawn): begun before that call, they belong to it. A new DataLoader's
            # workers, begun after, start the epoch it set even with the same seed.
            late = (not v[self.VALID] and v[self.SET_AT] > 0 and v[self.JOINED] < num_workers
                    and _began_before(v[self.SET_AT]))
            same = (v[self.VALID] or late) and key
            if same and v[self.JOINED] < num_workers:
                v[self.JOINED] += 1
            else:
                v[self.KEY_SEED], v[self.KEY_ITER], v[self.VALID] = seed, iteration, 1
                v[self.GEN_EPOCH], v[self.JOINED], v[self.WORKERS] = v[self.NEXT], 1, num_workers
                v[self.NEXT] += 1
            return v[self.GEN_EPOCH]

        return self.update(change)


def _auto_collating_fetcher() -> Optional[Any]:
    """The DataLoader fetcher calling iter() on us, when it batches what we
    yield with torch's default_collate (DataLoader's batch_size is not None)."""
    try:
        from torch.utils.data._utils.collate import default_collate
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:  # pragma: no cover - another torch layout
        return None
    frame: Any = sys._getframe(2)
    for _ in range(4):  # iter(dataset) is called from the fetcher's __init__
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if isinstance(owner, _IterableDatasetFetcher):
            if getattr(owner, "auto_collation", False) and getattr(owner, "collate_fn", None) is default_collate:
                return owner
            return None
        frame = frame.f_back
    return None


class Dataset(torch.utils.data.IterableDataset):
    """Batches of torch tensors from a dlfeed.Loader, one epoch per iteration.

    Keywords are dlfeed.Loader's (fields, batch_size, strategy, seed, ...), plus:
      rank, world_size: this process's shard; default: torch.distributed's when
        initialised, else 0 and 1.
      pin_memory: batches in page-locked memory: the loader's pool buffers are
        registered once each, no copy (needs CUDA; ignored with a warning otherwise).
      device: "cuda" or "cuda:N": yield CUDA tensors, copied on a stream of their own
        while the step runs on the previous batch (docs/python.md; needs CUDA, a clear
        error otherwise; not with DataLoader worker processes).
      overlap_epochs: read the next epoch while this one's last batches are consumed
        (dlfeed.Loader's; default: on with device=, else off).
      as_dict: yield {field: tensor, "sample_ids": int64 tensor} instead of a tuple
        (a single tensor when there is one field).

    Each iteration is the next epoch (0, 1, ...; the order of epoch e depends
    only on the seed and e), directly, in DataLoader(ds, batch_size=None) and
    with worker processes, persistent or not; set_epoch(e) says which epoch the
    next iteration runs.

    state_dict()/load_state_dict() save and restore the position mid-epoch (in the
    process that iterates; with DataLoader workers each worker has its own position).
    """

    def __init__(
        self,
        paths: Any,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        pin_memory: bool = False,
        as_dict: bool = False,
        device: Any = None,
        overlap_epochs: Optional[bool] = None,
        **loader_kwargs: Unpack[TorchDatasetKwargs],
    ) -> None:
        super().__init__()
        self.device = _device.cuda_device(device)  # a clear error without CUDA, now
        # Checked now, not when the first iteration makes the loader.
        _options.check_keywords(loader_kwargs, "dlfeed.torch.Dataset()")
        self._paths = paths
        self._kwargs = loader_kwargs
        comm = loader_kwargs.get("mpi_comm")
        # The loader's ranks are the communicator's (a data-parallel group), not torch.distributed's.
        dist = (comm.Get_rank(), comm.Get_size()) if comm is not None else _distributed()
        if rank is None:
            rank = dist[0] if dist else 0
        if world_size is None:
            world_size = dist[1] if dist else 1
        self.rank, self.world_size = int(rank), int(world_size)
        self.pin_memory = bool(pin_memory)
        self.as_dict = bool(as_dict)
        fields = loader_kwargs.get("fields")
        if fields is not None and not isinstance(fields, str):
            self._check_names(list(fields))
        self.overlap_epochs = overlap_epochs
        self._record = _EpochRecord(0)
        self._worker_iterations = 0  # in a worker process: iterations it made (persistent workers)
        self._pending: Optional[bytes] = None
        # Counts set_epoch() and load_state_dict() calls: a direct iteration moves the record to its
        # next epoch only when neither chose another since it began.
        self._epoch_sets = 0
        self._loader: Optional[Loader] = None
        self._loader_key: Optional[tuple] = None
        self._length: Optional[tuple] = None  # (loader key, batches per epoch) that __len__ counted

    # -- the loader of this process ------------------------------------------
    def _shard(self) -> tuple:
        # DataLoader workers read the rank's own order (the loader each makes is
        # the one a direct iteration makes); each takes a contiguous run of its
        # batches (_epoch), so the batches do not depend on the number of workers.
        info = torch.utils.data.get_worker_info()
        return self.rank, self.world_size, info is not None and info.num_workers > 1

    def _get_loader(self, rank: int, world: int) -> Loader:
        key = (os.getpid(), rank, world)
        # A loader closed by the caller (the parent's, before a DataLoader forks its
        # workers, as the fork rules ask) is made again when this process reads.
        if self._loader is None or self._loader_key != key or self._loader.closed:
            pin = self.pin_memory or self.device is not None
            kwargs: Dict[str, Any] = dict(self._kwargs)
            info = torch.utils.data.get_worker_info()
            if info is not None and info.num_workers > 1 and not kwargs.get("memory_budget"):
                # Each DataLoader worker makes a loader of its own: they share the
                # machine's budget (a quarter of its memory), not one each.
                kwargs["memory_budget"], _ = _dlfeed.machine_memory_budget(info.num_workers)
            loader = Loader(self._paths, rank=rank, world_size=world, device=self.device, pin_memory=pin,
                            overlap_epochs=self.overlap_epochs, **kwargs)
            self._check_names(loader.field_names)
            self._loader = loader
            self._loader_key = key
        return self._loader

    def _check_names(self, names: Sequence[str]) -> None:
        # as_dict's own key never hides a field of the user's data.
        if self.as_dict and _IDS_KEY in names:
            raise ValueError(
                f"dlfeed.torch.Dataset(as_dict=True): the data has a field named {_IDS_KEY!r}, the key as_dict "
                f"gives dlfeed's sample ids; read it with as_dict=False (a tuple of the fields, in the order of "
                f"fields=), or select the other fields with fields=")

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["_loader"] = None  # a worker (spawn or fork) makes its own
        d["_loader_key"] = None
        d["_length"] = None
        return d

    @property
    def loader(self) -> Loader:
        """The dlfeed.Loader of this process (made on first use)."""
        rank, world, _ = self._shard()
        return self._get_loader(rank, world)

    def __len__(self) -> int:
        """Batches per epoch of this rank: what a DataLoader over it yields too, with
        or without workers.

        It makes no loader to keep: ``len(DataLoader(ds, num_workers=K))`` runs in
        the training process, whose workers read, so counting reads nothing there.
        The loader of this process, once made, counts; before, a loader made only to
        count (the files indexed, nothing held in memory, no batch buffers) is
        closed at once. Under ``mpi=True``, ``mpi_comm`` or ``job_cache``, where making a loader is
        collective, it is this process's loader."""
        rank, world, _ = self._shard()
        key = (os.getpid(), rank, world)
        if self._loader is not None and self._loader_key == key and not self._loader.closed:
            return len(self._loader)
        if self._kwargs.get("mpi") or self._kwargs.get("job_cache") or self._kwargs.get("mpi_comm") is not None:
            return len(self._get_loader(rank, world))
        if self._length is None or self._length[0] != key:
            self._length = (key, self._count_batches(rank, world))
        return int(self._length[1])

    def _count_batches(self, rank: int, world: int) -> int:
        """len() of a loader made only to count: read nothing, hold nothing, stage nothing."""
        kwargs: Dict[str, Any] = dict(self._kwargs)
        kwargs.update(resident="off", unpack="off", memory_budget=1, stage_dir=None, trace=None)
        counter = Loader(self._paths, rank=rank, world_size=world, **kwargs)
        try:
            return len(counter)
        finally:
            counter.close()

    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs (during a direct iteration: its own;
        with DataLoader workers, the next DataLoader iteration's)."""
        return self._record.next_epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (like DistributedSampler.set_epoch);
        DataLoader workers, persistent ones too, follow it."""
        self._record.set_next(int(epoch))
        self._epoch_sets += 1
        self._pending = None

    # -- iteration ------------------------------------------------------------
    def _pack(self, batch: Any, tensors: List[Any]) -> Any:
        """The element yielded: a tuple of the fields' tensors (the one tensor of a single
        field), or with as_dict {field: tensor, "sample_ids": int64 tensor}."""
        ids = {_IDS_KEY: torch.from_numpy(batch.sample_ids.astype("int64"))} if self.as_dict else None
        return pack(batch.keys(), tensors, self.as_dict, ids)

    def _convert(self, batch: Any, copy_to_pin: bool = False) -> Any:
        out: List[Any] = []
        for i in range(len(batch.keys())):
            t = to_torch(batch, i)
            if copy_to_pin:
                t = self._pin(t)  # the pool could not be pinned: a copy
            out.append(t)
        return self._pack(batch, out)

    def _pin(self, t: Any) -> Any:
        if isinstance(t, list):
            return [self._pin(s) for s in t]
        if torch.cuda.is_available():
            return t.pin_memory()
        return t  # the loader warned: no CUDA

    def __iter__(self) -> Iterator[Any]:
        # Not a generator function: the checks and the epoch happen when
        # iter() is called (in a DataLoader worker, as it starts), not at the
        # first batch.
        rank, world, in_worker = self._shard()
        loader = self._get_loader(rank, world)
        if _auto_collating_fetcher() is not None:
            size = loader.options.batch_size
            raise ValueError(
                f"dlfeed.torch.Dataset yields whole batches (batch_size={size}): pass batch_size=None to the "
                "DataLoader, e.g. DataLoader(ds, batch_size=None, num_workers=2). DataLoader's own batching (its "
                f"default batch_size=1, or any number) would stack dlfeed's batches into another batch: shape "
                f"(1, {size}, ...) with the default")
        info = torch.utils.data.get_worker_info()
        if self._pending is not None and info is not None:
            raise ValueError(
                "dlfeed.torch.Dataset: a position from load_state_dict() resumes iteration in one process "
                "(directly, or DataLoader with num_workers=0), not in DataLoader workers, each of which reads "
                "its own part of the shard; call set_epoch() to start a whole epoch instead")
        if self._pending is not None:
            loader.restore(self._pending)
            self._record.set_next(loader.epoch)
            self._pending = None
        if info is None:
            return self._epoch(loader, self._record.next_epoch, rank, world, in_worker, direct=True,
                               sets=self._epoch_sets)
        # A worker process: every worker of one DataLoader iteration takes the
        # same epoch, the next one, from the shared record.
        epoch = self._record.join(info.seed - info.id, self._worker_iterations, info.num_workers)
        self._worker_iterations += 1
        return self._epoch(loader, epoch, rank, world, in_worker, direct=False)

    def _advance(self, epoch: int, sets: int) -> None:
        """A direct iteration of `epoch` is ending: the next one runs epoch + 1, unless set_epoch() or
        load_state_dict() chose another since it began (counted by `sets`), which wins."""
        if self._epoch_sets == sets:
            self._record.set_next(epoch + 1)

    def _epoch(self, loader: Loader, epoch: int, rank: int, world: int, in_worker: bool,
               direct: bool, sets: int = 0) -> Iterator[Any]:
        if self.device is not None:
            if in_worker:
                raise ValueError("dlfeed.torch.Dataset(device=...): the copies to the GPU run in the training "
                                 "process; use num_workers=0 (dlfeed's own threads read and decode)")
            yield from self._device_epoch(loader, epoch, direct, sets)
            return
        # Pinned pool buffers: a copy the trainer issues itself (x.cuda(non_blocking=True))
        # reads the batch's buffer after the tensor may be dropped; keep the last two
        # batches alive so the pool does not reuse a buffer a copy still reads.
        recent: Any = collections.deque(maxlen=2) if loader.pinned else None
        copy_to_pin = self.pin_memory and not loader.pinned
        if in_worker:
            # Worker k of K reads the rank's batches [k*n/K, (k+1)*n/K) of the n a
            # direct iteration gives (drop_last_batch drops only the rank's last
            # partial batch): the same batches whatever K, len(DataLoader) true.
            info = torch.utils.data.get_worker_info()
            assert info is not None  # in_worker
            n = len(loader)
            first, end = info.id * n // info.num_workers, (info.id + 1) * n // info.num_workers
            if first < end:
                it = loader._iter_epoch_at(epoch, first * loader.options.batch_size)
                for _ in range(end - first):
                    batch = next(it, None)
                    if batch is None:
                        break
                    if recent is not None:
                        recent.append(batch)
                    yield self._convert(batch, copy_to_pin)
                    del batch
            return
        batches = loader.iter_epoch(epoch)
        left = loader._core.batches_left  # this epoch's, counted as its batches are yielded
        advanced = False
        for batch in batches:
            if recent is not None:
                recent.append(batch)
            left -= 1
            if direct and not advanced and left <= 0:
                # The last batch: the next iteration runs the next epoch, also when the trainer takes
                # exactly len(ds) steps (zip(range(steps), ds)) and never asks for the end.
                self._advance(epoch, sets)
                advanced = True
            yield self._convert(batch, copy_to_pin)
            del batch
        if direct and not advanced:  # a worker generation took its epoch when it started
            self._advance(epoch, sets)

    def _device_epoch(self, loader: Loader, epoch: int, direct: bool, sets: int) -> Iterator[Any]:
        batches = loader.iter_epoch(epoch)
        left = loader._core.batches_left
        advanced = False
        for d in batches:
            left -= 1
            if direct and not advanced and left <= 0:
                self._advance(epoch, sets)  # the last batch: as _epoch
                advanced = True
            yield self._pack(d, [d[n] for n in d.keys()])
            del d
        if direct and not advanced:
            self._advance(epoch, sets)

    # -- resume ---------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Where the iteration is: resume with load_state_dict() on a Dataset with the
        same options (and the same rank and world size)."""
        # A position load_state_dict() gave and no iteration took yet is where the next one resumes.
        state = self._pending if self._pending is not None else (
            self._loader.state() if self._loader is not None else None)
        if state is not None:
            s = _dlfeed.decode_state(state)
            if s["epoch"] != self.epoch or (s["position"] == 0 and s.get("global_start", 0) == 0):
                state = None  # not inside the current epoch (an elastic restore's start is inside it)
        return {"epoch": self.epoch, "loader_state": state, "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._record.set_next(int(state_dict["epoch"]))
        self._epoch_sets += 1
        self._pending = state_dict.get("loader_state")
