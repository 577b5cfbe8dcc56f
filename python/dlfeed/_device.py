# SPDX-License-Identifier: Apache-2.0
"""Batches on the GPU: page-locked pool buffers and copies that overlap the training step.

The copy of batch k+1 runs on a CUDA stream of its own while the consumer's step
runs on batch k; the consumer's stream waits for a batch's copy (an event) before
it is handed out, and the host batch (its pool buffers) is kept until that copy has
finished, then dropped, so it returns to dlfeed's pool. Pool buffers are
registered page-locked once each (``pin_memory``), so copies run at the link's
rate. Everything CUDA goes through PyTorch's public API; libdlfeed never links CUDA.
"""
from __future__ import annotations

import collections
import warnings
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple

from . import _dlfeed

#: Bytes of copies to the device in flight at once (their own budget: host
#: buffers of batches whose copy has not finished stay out of the pool).
DEFAULT_H2D_BUDGET = 512 << 20
#: Batches copied ahead of the one the consumer works on.
DEFAULT_DEVICE_PREFETCH = 2
#: One copy in this many is timed on the device (two timing events) and recorded
#: into the counters' h2d stage; the others cost one plain event each.
DEFAULT_TIME_EVERY = 8


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a test dependency
        raise RuntimeError("device='cuda' needs PyTorch (pip install torch with CUDA)") from e
    return torch


def cuda_device(device: Any) -> Optional[Any]:
    """torch.device for ``device`` ("cuda", "cuda:N", a torch.device), or None for
    None / "cpu". A clear RuntimeError when CUDA is not available."""
    if device is None:
        return None
    torch = _torch()
    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError(f"device={device!r}: dlfeed delivers batches to 'cuda' or 'cuda:N' (or 'cpu')")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r}: CUDA is not available (torch.cuda.is_available() is False: "
                           f"no GPU, no driver, or a CPU-only torch {torch.__version__}); use device=None for "
                           "batches in host memory")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def _cudart_functions() -> Optional[Tuple[int, int]]:
    """Addresses of cudaHostRegister and cudaHostUnregister in the CUDA runtime
    PyTorch loaded (found in /proc/self/maps), or None."""
    import ctypes  # here, not at import: only CUDA needs it (and libffi may be absent where dlfeed runs)

    names: List[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if "libcudart" in path and path not in names:
                    names.append(path)
    except OSError:
        pass
    names += ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            reg, unreg = lib.cudaHostRegister, lib.cudaHostUnregister
        except (OSError, AttributeError):
            continue
        return (ctypes.cast(reg, ctypes.c_void_p).value or 0, ctypes.cast(unreg, ctypes.c_void_p).value or 0)
    return None


def pinned_allocator(where: str) -> Optional[Any]:
    """A _dlfeed.PinnedAllocator registering each pool buffer page-locked once, or
    None with a warning (no CUDA: ordinary batches)."""
    try:
        import torch
        import torch.utils.data
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        warnings.warn(f"{where}: pin_memory=True ignored: CUDA is not available; batches are in ordinary "
                      "(pageable) memory", RuntimeWarning, stacklevel=3)
        return None
    if torch.utils.data.get_worker_info() is not None:
        # A DataLoader worker process: CUDA cannot start in a forked child, and the
        # copies run in the training process anyway (DataLoader(pin_memory=True) pins there).
        warnings.warn(f"{where}: pin_memory=True ignored in a DataLoader worker process; pin in the training "
                      "process (DataLoader(..., pin_memory=True)) or use device= with num_workers=0",
                      RuntimeWarning, stacklevel=3)
        return None
    torch.cuda.init()  # the runtime is loaded and its context made before a loader thread registers
    fns = _cudart_functions()
    if fns is None or not all(fns):
        warnings.warn(f"{where}: pin_memory=True: the CUDA runtime's cudaHostRegister was not found next to "
                      "PyTorch; batches are in ordinary (pageable) memory", RuntimeWarning, stacklevel=3)
        return None
    return _dlfeed.page_locked_allocator(fns[0], fns[1])


class DeviceBatch(dict):
    """A batch on the device: {field: torch CUDA tensor} (each has __dlpack__, so any
    DLPack consumer takes it: torch, CuPy, JAX), with the host batch's place."""

    epoch: int = 0
    index: int = 0
    position: int = 0
    sample_ids: Any = None

    def __len__(self) -> int:  # samples, as dlfeed.Batch
        return 0 if self.sample_ids is None else len(self.sample_ids)

    def keys(self) -> Any:  # type: ignore[override]
        return list(super().keys())


class _Copy:
    __slots__ = ("host", "start", "done", "nbytes", "t0", "epoch", "index")


class DeviceCopier:
    """Copies host tensors to one CUDA device on a stream of its own.

    submit() issues a batch's copies and returns its device tensors; ready() makes
    the consumer's current stream wait for them; the host batch is kept until the
    copy's event has fired (retire), then dropped. Bytes in flight stay within
    ``budget_bytes`` (a submit waits for the oldest copies when they would not).
    One copy in ``time_every`` is timed on the device (a start and an end timing
    event); ``record(t0_ns, ns, bytes, epoch, index)`` receives each timed copy when
    it has finished. The others get one plain (non-timing) event, and no call.
    """

    def __init__(self, device: Any, budget_bytes: int = DEFAULT_H2D_BUDGET,
                 record: Optional[Callable[..., None]] = None, now: Optional[Callable[[], int]] = None,
                 time_every: int = DEFAULT_TIME_EVERY) -> None:
        torch = _torch()
        self.torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.budget = int(budget_bytes)
        self.record = record
        self.now = now
        self.pending: Deque[_Copy] = collections.deque()
        self.in_flight = 0
        self.copies = 0
        self.bytes = 0
        self.copy_ns = 0  # of the timed copies
        self.timed = 0
        self.timed_bytes = 0
        self.waited_ns = 0
        self.time_every = max(1, int(time_every))
        self.submitted = 0

    def submit(self, host: Any, tensors: Dict[str, Any], epoch: int = 0, index: int = 0) -> Tuple[Dict[str, Any], Any]:
        torch = self.torch
        nbytes = sum(_nbytes(t) for t in tensors.values())
        while self.pending and self.in_flight + nbytes > self.budget:
            self._retire(block=True)
        c = _Copy()
        c.host, c.nbytes, c.epoch, c.index = host, nbytes, epoch, index
        timed = self.submitted % self.time_every == 0
        self.submitted += 1
        c.t0 = self.now() if timed and self.now is not None else 0
        with torch.cuda.stream(self.stream):
            c.start = None
            if timed:
                c.start = torch.cuda.Event(enable_timing=True)
                c.start.record(self.stream)
            out = {k: _to_device(t, self.device) for k, t in tensors.items()}
            c.done = torch.cuda.Event(enable_timing=timed)
            c.done.record(self.stream)
        self.pending.append(c)
        self.in_flight += nbytes
        return out, c.done

    def ready(self, out: Dict[str, Any], done: Any) -> None:
        """The consumer's stream waits for the copy; the device memory is marked
        as used by it (the caching allocator then does not reuse it early)."""
        cur = self.torch.cuda.current_stream(self.device)
        cur.wait_event(done)
        for t in out.values():
            for x in (t if isinstance(t, list) else [t]):
                x.record_stream(cur)
        self.poll()

    def poll(self) -> None:
        """Retires the copies that have finished (their host batches go back)."""
        while self.pending and self.pending[0].done.query():
            self._retire(block=False)

    def _retire(self, block: bool) -> None:
        c = self.pending.popleft()
        if block:
            import time

            t = time.perf_counter_ns()
            c.done.synchronize()
            self.waited_ns += time.perf_counter_ns() - t
        self.in_flight -= c.nbytes
        self.copies += 1
        self.bytes += c.nbytes
        if c.start is not None:
            ns = int(c.start.elapsed_time(c.done) * 1e6)
            self.timed += 1
            self.timed_bytes += c.nbytes
            self.copy_ns += ns
        if c.start is not None and self.record is not None:
            try:
                self.record(c.t0, ns, c.nbytes, c.epoch, c.index)
            except ValueError:  # the loader was closed while copies were in flight: nothing to record into
                self.record = None
        c.host = None  # the host batch's buffers return to dlfeed's pool now

    def close(self) -> None:
        while self.pending:
            self._retire(block=True)

    def stats(self) -> Dict[str, Any]:
        return {"copies": self.copies, "bytes": self.bytes, "timed_copies": self.timed,
                "timed_bytes": self.timed_bytes, "copy_ns": self.copy_ns,
                "gb_s": self.timed_bytes / self.copy_ns if self.copy_ns else 0.0,
                "in_flight_bytes": self.in_flight, "waited_for_budget_ns": self.waited_ns}


def _nbytes(t: Any) -> int:
    if isinstance(t, list):
        return sum(_nbytes(x) for x in t)
    return t.numel() * t.element_size()


def _to_device(t: Any, device: Any) -> Any:
    if isinstance(t, list):
        return [_to_device(x, device) for x in t]
    return t.to(device, non_blocking=True)


def feed(batches: Iterable[Any], convert: Callable[[Any], Tuple[Dict[str, Any], Any]], copier: DeviceCopier,
         prefetch: int = DEFAULT_DEVICE_PREFETCH) -> Iterator[Tuple[Dict[str, Any], Any]]:
    """Yields (device tensors, host batch info) for each host batch: the copies of
    the next ``prefetch`` batches are issued before one is handed out, so they
    overlap the consumer's step on it. ``convert(host)`` gives ({name: CPU tensor},
    info); the host batch itself is held by the copier until its copy is done.
    At the end the copier is not closed (copies still running are retired by its
    next poll, so the next epoch's copies go on behind them); left early, it is."""
    queue: Deque[Tuple[Dict[str, Any], Any, Any]] = collections.deque()
    it = iter(batches)
    more = True

    def fill() -> None:
        nonlocal more
        while more and len(queue) < max(1, prefetch):
            host = next(it, None)
            if host is None:
                more = False
                return
            tensors, info = convert(host)
            out, done = copier.submit(host, tensors, getattr(host, "epoch", 0), getattr(host, "index", 0))
            del host
            queue.append((out, done, info))

    finished = False
    try:
        fill()
        while queue:
            out, done, info = queue.popleft()
            fill()  # batch k+1's copy is issued before the step on batch k
            copier.ready(out, done)
            yield out, info
            del out
        finished = True
    finally:
        if finished:
            copier.poll()  # the epoch's end waits for no copy: the next epoch's go on behind them
        else:
            copier.close()  # left early: its copies finish (and are recorded) now
