"""PyTorch adaptor: an IterableDataset that yields torch tensors in dlfeed's memory.

    ds = dlfeed.torch.Dataset("data/train", fields=["x", "y"], batch_size=64,
                              strategy="global_shuffle", seed=1)
    for epoch in range(3):
        for x, y in ds:          # torch tensors, zero copy (DLPack), one epoch per `for`
            ...

No DataLoader worker processes are needed: dlfeed's C++ threads read and decode.
Rank and world size come from torch.distributed when it is initialised (or pass
them). Wrapped in a DataLoader(num_workers=K) anyway, each worker reads its own
disjoint part of this rank's shard, and no sample is read twice.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import torch
import torch.utils.data

from ._loader import Loader

__all__ = ["Dataset", "to_torch"]


def to_torch(batch: Any, index: Union[int, str]) -> Any:
    """Field ``index`` of a dlfeed.Batch as a torch tensor sharing its memory (a list of
    tensors for a ragged field)."""
    t = batch.tensor(index)
    if isinstance(t, list):
        return [torch.from_dlpack(s) for s in t]
    return torch.from_dlpack(t)


def _distributed() -> Optional[tuple]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class Dataset(torch.utils.data.IterableDataset):
    """Batches of torch tensors from a dlfeed.Loader, one epoch per iteration.

    Keywords are dlfeed.Loader's (fields, batch_size, strategy, seed, ...), plus:
      rank, world_size: this process's shard; default: torch.distributed's when
        initialised, else 0 and 1.
      pin_memory: copy each tensor to page-locked memory (needs CUDA; ignored with a
        warning otherwise).
      as_dict: yield {field: tensor, "sample_ids": int64 tensor} instead of a tuple
        (a single tensor when there is one field).

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
        **loader_kwargs: Any,
    ) -> None:
        super().__init__()
        for key in ("rank", "world_size"):
            if key in loader_kwargs:  # pragma: no cover - caught by the signature
                raise TypeError(key)
        self._paths = paths
        self._kwargs = loader_kwargs
        dist = _distributed()
        if rank is None:
            rank = dist[0] if dist else 0
        if world_size is None:
            world_size = dist[1] if dist else 1
        self.rank, self.world_size = int(rank), int(world_size)
        self.pin_memory = bool(pin_memory)
        self.as_dict = bool(as_dict)
        self.epoch = 0
        self._pending: Optional[bytes] = None
        self._loader: Optional[Loader] = None
        self._loader_key: Optional[tuple] = None
        self._warned_pin = False

    # -- the loader of this process ------------------------------------------
    def _shard(self) -> tuple:
        info = torch.utils.data.get_worker_info()
        if info is None or info.num_workers <= 1:
            return self.rank, self.world_size, False
        return (self.rank * info.num_workers + info.id, self.world_size * info.num_workers, True)

    def _get_loader(self, rank: int, world: int) -> Loader:
        key = (os.getpid(), rank, world)
        if self._loader is None or self._loader_key != key:
            self._loader = Loader(self._paths, rank=rank, world_size=world, **self._kwargs)
            self._loader_key = key
        return self._loader

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["_loader"] = None  # a worker (spawn or fork) makes its own
        d["_loader_key"] = None
        return d

    @property
    def loader(self) -> Loader:
        """The dlfeed.Loader of this process (made on first use)."""
        rank, world, _ = self._shard()
        return self._get_loader(rank, world)

    def __len__(self) -> int:
        """Batches per epoch of this rank (without DataLoader workers)."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (like DistributedSampler.set_epoch)."""
        self.epoch = int(epoch)
        self._pending = None

    # -- iteration ------------------------------------------------------------
    def _convert(self, batch: Any, keep: Optional[int]) -> Any:
        names = batch.keys()
        out: List[Any] = []
        for i in range(len(names)):
            t = to_torch(batch, i)
            if keep is not None:
                t = t[:keep]
            if self.pin_memory:
                t = self._pin(t)
            out.append(t)
        if self.as_dict:
            d: Dict[str, Any] = dict(zip(names, out))
            ids = torch.from_numpy(batch.sample_ids.astype("int64"))
            d["sample_ids"] = ids[:keep] if keep is not None else ids
            return d
        return out[0] if len(out) == 1 else tuple(out)

    def _pin(self, t: Any) -> Any:
        if isinstance(t, list):
            return [self._pin(s) for s in t]
        if torch.cuda.is_available():
            return t.pin_memory()
        if not self._warned_pin:
            warnings.warn("dlfeed.torch: pin_memory=True ignored: CUDA is not available", RuntimeWarning)
            self._warned_pin = True
        return t

    def __iter__(self) -> Iterator[Any]:
        rank, world, in_worker = self._shard()
        loader = self._get_loader(rank, world)
        if self._pending is not None:
            loader.restore(self._pending)
            self.epoch = loader.epoch
            self._pending = None
        epoch = self.epoch
        # With worker processes, padding (the last positions of the global order
        # read again to make shards equal) would duplicate samples: trim it.
        valid = None
        if in_worker and not loader.options.order.drop_last:
            total = loader.num_samples
            indices = loader.options.order.indices
            if indices is not None:
                total = len(indices)
            valid = max(0, -(-(total - rank) // world))
        for batch in loader.iter_epoch(epoch):
            keep = None
            if valid is not None and batch.position + len(batch) > valid:
                keep = max(0, valid - batch.position)
                if keep == 0:
                    continue
            yield self._convert(batch, keep)
            del batch
        self.epoch = epoch + 1

    # -- resume ---------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Where the iteration is: resume with load_state_dict() on a Dataset with the
        same options (and the same rank and world size)."""
        state = self._loader.state() if self._loader is not None else self._pending
        if state is not None:
            from . import decode_state

            s = decode_state(state)
            if s["epoch"] != self.epoch or s["position"] == 0:
                state = None  # not inside the current epoch
        return {"epoch": self.epoch, "loader_state": state, "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.epoch = int(state_dict["epoch"])
        self._pending = state_dict.get("loader_state")
