# SPDX-License-Identifier: Apache-2.0
"""Batches on the GPU: page-locked pool buffers and copies that overlap the training step.

The copy of batch k+1 runs on a CUDA stream of its own while the consumer's step
runs on batch k; the consumer's stream waits for a batch's copy (an event) before
it is handed out, and the host batch (its pool buffers) is kept until that copy has
finished, then dropped, so it returns to dlfeed's pool. Pool buffers are
registered page-locked once each (``pin_memory``), so copies run at the link's
rate. The copies are issued by a feeder thread (DeviceFeed), so the consumer's
next() only takes the host batch, hands it over and makes its stream wait for a
batch already issued. Every CUDA call is in CudaStream, through PyTorch's public
API; the rest (DeviceCopier, Feeder, DeviceFeed) takes any StreamOps, so the tests
run it on the CPU with a stand-in (tests/python/adaptors/host_stream.py).
libdlfeed never links CUDA.

dlfeed.Loader(device=...) imports this module on first use (it needs PyTorch).
"""
from __future__ import annotations

import collections
import queue
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Protocol, Tuple

from .. import _dlfeed
from .._loader import DEFAULT_DEVICE_PREFETCH, DEFAULT_H2D_BUDGET

__all__ = ["DEFAULT_DEVICE_PREFETCH", "DEFAULT_H2D_BUDGET", "DEFAULT_TIME_EVERY", "CudaStream", "DeviceBatch",
           "DeviceCopier", "DeviceFeed", "Feeder", "StreamOps", "close_loader", "cuda_device", "loader_feed",
           "pinned_allocator"]

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
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise TypeError(f"device={device!r}: expected 'cuda', 'cuda:N', N or a torch.device (or 'cpu')")
    if isinstance(device, int):
        device = f"cuda:{device}"  # torch's meaning of an index
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device={device!r}: expected 'cuda', 'cuda:N' or 'cpu' ({e})") from None
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
        torch = None  # type: ignore[assignment]
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


def _each(t: Any, fn: Callable[[Any], Any]) -> Any:
    """fn over a field's tensor, or over each tensor of a field of lists (ragged)."""
    return [fn(x) for x in t] if isinstance(t, list) else fn(t)


def _nbytes(t: Any) -> int:
    if isinstance(t, list):
        return sum(_nbytes(x) for x in t)
    return t.numel() * t.element_size()


class StreamOps(Protocol):
    """What DeviceCopier, Feeder and DeviceFeed ask of a copy stream: CudaStream on
    a GPU; tests run the same path on the CPU with a stand-in of this shape."""

    def enter_thread(self) -> None:
        """On the feeder thread, before its first copy."""

    def copy(self, tensors: Dict[str, Any], timed: bool) -> Tuple[Dict[str, Any], Any, Any]:
        """Issues the copies: (device tensors, start event or None, done event)."""

    def finished(self, done: Any) -> bool:
        """Whether the copy of ``done`` has finished (without waiting)."""

    def wait(self, done: Any) -> None:
        """Waits on the host until the copy of ``done`` has finished."""

    def elapsed_ns(self, start: Any, done: Any) -> int:
        """The device's time for a timed copy."""

    def hand_over(self, out: Dict[str, Any], done: Any) -> None:
        """The consumer (on its thread) may use ``out``: its work is ordered after the copy."""

    def close(self) -> None:
        """The loader is closed: release what the stream holds of its own."""


class CudaStream:
    """Every CUDA call of the device path, and nothing else: a copy stream on one
    device, its events, and the hand-over of copied tensors to the consumer's
    stream (the torch.cuda calls the path has made since issue 28). copy() runs on
    the feeder thread, hand_over() on the consumer's. A StreamOps."""

    def __init__(self, device: Any) -> None:
        torch = _torch()
        self.torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        # The consumer's current stream, as a torch.cuda.Stream (made once per stream, not per
        # batch: torch.cuda.current_stream() costs ~30 us a call), and the key it was made for.
        self._now_stream = getattr(torch._C, "_cuda_getCurrentStream", None)
        self._cur_key: Any = None
        self._cur: Any = None

    def consumer_stream(self) -> Any:
        """torch.cuda.current_stream(device) of the calling thread, reused while it is the same."""
        if self._now_stream is None:  # a torch without the raw call: the public one every time
            return self.torch.cuda.current_stream(self.device)
        key = self._now_stream(self.device.index)
        if key != self._cur_key or self._cur is None:
            self._cur = self.torch.cuda.current_stream(self.device)
            self._cur_key = key
        return self._cur

    def enter_thread(self) -> None:
        """On the feeder thread, before its first copy: its current device is the copies'."""
        self.torch.cuda.set_device(self.device)

    def copy(self, tensors: Dict[str, Any], timed: bool) -> Tuple[Dict[str, Any], Any, Any]:
        """Issues the copies on the copy stream: (device tensors, start event or None, done event)."""
        torch = self.torch
        start = None
        with torch.cuda.stream(self.stream):
            if timed:
                start = torch.cuda.Event(enable_timing=True)
                start.record(self.stream)
            out = {k: _each(t, lambda x: x.to(self.device, non_blocking=True)) for k, t in tensors.items()}
            done = torch.cuda.Event(enable_timing=timed)
            done.record(self.stream)
        return out, start, done

    def finished(self, done: Any) -> bool:
        return bool(done.query())

    def wait(self, done: Any) -> None:
        done.synchronize()

    def elapsed_ns(self, start: Any, done: Any) -> int:
        return int(start.elapsed_time(done) * 1e6)

    def hand_over(self, out: Dict[str, Any], done: Any) -> None:
        """The consumer's current stream waits for the copy (on the device, not the
        host); the device memory is marked as used by that stream, so the caching
        allocator does not reuse it before the consumer's work on it is done."""
        cur = self.consumer_stream()
        cur.wait_event(done)
        for t in out.values():
            for x in (t if isinstance(t, list) else [t]):
                x.record_stream(cur)

    def close(self) -> None:
        """Nothing of its own to release: the stream and its events are torch's."""


class _Copy:
    __slots__ = ("host", "start", "done", "nbytes", "t0", "epoch", "index")
    host: Any
    start: Any
    done: Any
    nbytes: int
    t0: int
    epoch: int
    index: int


class DeviceCopier:
    """Copies host tensors to the device on a stream of its own (``ops``: a
    StreamOps, CudaStream on a GPU).

    submit() issues a batch's copies and returns its device tensors and the copy's
    event; the host batch is kept until that event has fired (retire), then
    dropped, so its buffers return to dlfeed's pool only once the copy has read
    them. Bytes in flight stay within ``budget_bytes`` (a submit waits for the
    oldest copies when they would not). One copy in ``time_every`` is timed on the
    device (a start and an end timing event); ``record(t0_ns, ns, bytes, epoch,
    index)`` receives each timed copy when it has finished; the others get one
    plain event, and no call. Thread-safe: the feeder thread submits and polls,
    close() may come from the consumer's.
    """

    def __init__(self, ops: StreamOps, budget_bytes: int = DEFAULT_H2D_BUDGET,
                 record: Optional[Callable[..., None]] = None, now: Optional[Callable[[], int]] = None,
                 time_every: int = DEFAULT_TIME_EVERY) -> None:
        self.ops = ops
        self.budget = int(budget_bytes)
        self.record = record
        self.now = now
        self.lock = threading.Lock()
        self.pending: Deque[_Copy] = collections.deque()
        self.in_flight = 0
        self.max_in_flight = 0
        self.copies = 0
        self.bytes = 0
        self.copy_ns = 0  # of the timed copies
        self.timed = 0
        self.timed_bytes = 0
        self.waited_ns = 0  # the feeder, for the budget
        self.consumer_waited_ns = 0  # the consumer, in next(), for a batch whose copy was not yet issued
        self.consumer_waits = 0
        self.time_every = max(1, int(time_every))
        self.submitted = 0

    def submit(self, host: Any, tensors: Dict[str, Any], epoch: int = 0, index: int = 0) -> Tuple[Dict[str, Any], Any]:
        nbytes = sum(_nbytes(t) for t in tensors.values())
        with self.lock:
            while self.pending and self.in_flight + nbytes > self.budget:
                self._retire(block=True)
            c = _Copy()
            c.host, c.nbytes, c.epoch, c.index = host, nbytes, epoch, index
            timed = self.submitted % self.time_every == 0
            self.submitted += 1
            c.t0 = self.now() if timed and self.now is not None else 0
            out, c.start, c.done = self.ops.copy(tensors, timed)
            self.pending.append(c)
            self.in_flight += nbytes
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return out, c.done

    def poll(self) -> None:
        """Retires the copies that have finished (their host batches go back)."""
        with self.lock:
            while self.pending and self.ops.finished(self.pending[0].done):
                self._retire(block=False)

    def _retire(self, block: bool) -> None:
        c = self.pending.popleft()
        if block:
            t = time.perf_counter_ns()
            self.ops.wait(c.done)
            self.waited_ns += time.perf_counter_ns() - t
        self.in_flight -= c.nbytes
        self.copies += 1
        self.bytes += c.nbytes
        if c.start is not None:
            ns = self.ops.elapsed_ns(c.start, c.done)
            self.timed += 1
            self.timed_bytes += c.nbytes
            self.copy_ns += ns
            if self.record is not None:
                try:
                    self.record(c.t0, ns, c.nbytes, c.epoch, c.index)
                except ValueError:  # the loader was closed while copies were in flight: nothing to record into
                    self.record = None
        c.host = None  # the host batch's buffers return to dlfeed's pool now

    def close(self) -> None:
        """Waits for every copy in flight (each is retired and recorded)."""
        with self.lock:
            while self.pending:
                self._retire(block=True)

    def stats(self) -> Dict[str, Any]:
        return {"copies": self.copies, "bytes": self.bytes, "timed_copies": self.timed,
                "timed_bytes": self.timed_bytes, "copy_ns": self.copy_ns,
                "gb_s": self.timed_bytes / self.copy_ns if self.copy_ns else 0.0,
                "in_flight_bytes": self.in_flight, "max_in_flight_bytes": self.max_in_flight,
                "waited_for_budget_ns": self.waited_ns, "consumer_waited_ns": self.consumer_waited_ns,
                "consumer_waits": self.consumer_waits}


class _Failure:
    """An exception raised on the feeder thread, raised again in the consumer's next()."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _raise(holder: Any, attr: str) -> None:
    """Raises the exception in ``holder.attr`` and clears it there: no frame or
    object the traceback holds keeps the exception (a cycle that would keep the
    batches of those frames alive until the garbage collector runs)."""
    error = getattr(holder, attr)
    setattr(holder, attr, None)
    try:
        raise error
    finally:
        del error


def _issue(host: Any, job: "_Job") -> None:
    """One host batch: its tensors, their copies issued, (batch, device tensors, event) queued."""
    tensors, info = job.convert(host)
    out, done = job.copier.submit(host, tensors, getattr(host, "epoch", 0), getattr(host, "index", 0))
    del tensors, host
    job.ready.put((job.wrap(out, info), out, done))


class _Job:
    """What the feeder does with one DeviceFeed's host batches, and where the results go."""

    __slots__ = ("convert", "wrap", "copier", "ready", "cancelled", "failed")

    def __init__(self, convert: Callable[[Any], Any], wrap: Callable[..., Any], copier: DeviceCopier) -> None:
        self.convert, self.wrap, self.copier = convert, wrap, copier
        self.ready: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.cancelled = False  # the feed was closed: its host batches still queued are dropped
        self.failed = False


def _feed_loop(ops: Any, todo: "queue.SimpleQueue[Any]") -> None:
    """The feeder thread: (host batch, job) items in order; (None, event): set the event
    (everything before it is done); None: end. It holds no reference to a loader or a
    DeviceFeed, so dropping them lets it be stopped."""
    entered: Optional[BaseException] = None
    try:
        ops.enter_thread()
    except BaseException as e:  # every batch then fails with it, in the consumer's next()
        entered = e
    while True:
        item = todo.get()
        if item is None:
            return
        host, job = item
        del item
        if host is None:
            job.set()
            continue
        if job.cancelled or job.failed:
            del host
            continue
        try:
            if entered is not None:
                raise entered
            _issue(host, job)
            del host
            job.copier.poll()
        except BaseException as e:  # surfaces in the consumer's next(), the same exception
            job.failed = True
            job.ready.put(_Failure(e))
            del e
        host = job = None  # nothing of this batch or feed kept while the thread waits


class Feeder:
    """A loader's feeder thread: issues the copies of the host batches its DeviceFeeds
    hand it, in order, one epoch's feed after the other. It lives as long as the loader
    (a thread's first CUDA calls cost about a millisecond, too much at every epoch's
    start): stop() ends it; the loader's close() calls it, and so does the loader's
    garbage collection."""

    def __init__(self, ops: Any) -> None:
        self.todo: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.stopped = False
        self.thread = threading.Thread(target=_feed_loop, args=(ops, self.todo), name="dlfeed-h2d-feeder",
                                       daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def barrier(self) -> None:
        """Returns once the thread has passed everything handed to it before."""
        if self.thread is threading.current_thread() or not self.alive():
            return
        passed = threading.Event()
        self.todo.put((None, passed))
        while not passed.wait(1.0):
            if not self.alive():
                return

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.todo.put(None)
        if self.thread is not threading.current_thread():  # (a collection run on the feeder itself)
            self.thread.join()


class DeviceFeed:
    """Batches on the device, one per next(), with little work on the consumer's thread.

    The consumer's next() returns the oldest batch whose copies the feeder thread has
    issued, after making the consumer's stream wait for them (``copier.ops.hand_over``),
    then takes the next host batch from ``host`` (on its own thread, so the loader's
    counters see the consumer: its steps, its wait for data) and hands it to the
    ``feeder`` (a Feeder). The feeder converts each host batch (``convert(host)`` ->
    ({name: CPU tensor}, info)), issues its copies (``copier.submit``; the copier keeps
    the host batch until its copy is done) and queues ``wrap(device tensors, info)``.
    ``prefetch`` host batches are handed over ahead of the one returned, so batch k+1's
    copies are issued while the consumer's step runs on batch k.

    A next() that finds no batch ready waits (``on_wait(t0, t1)`` in ``clock``'s time
    records it: the loader's stall). An error of the host iterator is raised after the
    batches handed over before it; an error on the feeder thread is raised by next() as
    it was raised there. close() (also on the consumer's leaving early, by ``del`` or
    garbage collection) drops the host batches not yet issued and waits for the copies
    in flight; at the epoch's end the copies still running are left to finish behind
    the next epoch's.
    """

    def __init__(self, host: Iterable[Any], convert: Callable[[Any], Tuple[Dict[str, Any], Any]],
                 wrap: Callable[[Dict[str, Any], Any], Any], copier: DeviceCopier, feeder: Feeder,
                 prefetch: int = DEFAULT_DEVICE_PREFETCH, on_wait: Optional[Callable[[int, int], None]] = None,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._host: Optional[Iterator[Any]] = iter(host)
        self._job = _Job(convert, wrap, copier)
        self._copier = copier
        self._feeder = feeder
        self._ahead = max(1, int(prefetch))
        self._on_wait, self._clock = on_wait, clock
        self._handed = 0  # host batches handed over and not yet returned
        self._more = True
        self._host_error: Optional[BaseException] = None
        self._closed = False

    def __iter__(self) -> "DeviceFeed":
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._handed == 0:
            # The first call: one host batch, alone, so that the feeder issues it without the
            # consumer's next pulls competing for the GIL; the rest follow it below.
            self._hand_over_host(1)
        if self._handed == 0:
            self.close(finished=self._host_error is None)
            if self._host_error is not None:
                _raise(self, "_host_error")
            raise StopIteration
        item = self._pop()
        self._handed -= 1
        if isinstance(item, _Failure):
            self.close()
            _raise(item, "error")
        batch, out, done = item
        self._copier.ops.hand_over(out, done)
        # Last, the next host batch: the feeder it wakes works while the consumer's step
        # runs, not while this next() still needs the GIL.
        self._hand_over_host(self._ahead)
        return batch

    def _hand_over_host(self, ahead: int) -> None:
        """Takes host batches until ``ahead`` are handed over (and not yet returned)."""
        while self._more and self._handed < ahead:
            try:
                host = next(self._host)  # type: ignore[arg-type]
            except StopIteration:
                self._more = False
                return
            except Exception as e:  # raised once the batches before it are delivered
                self._more = False
                self._host_error = e
                return
            except BaseException:
                self.close()
                raise
            self._feeder.todo.put((host, self._job))
            del host
            self._handed += 1

    def _pop(self) -> Any:
        ready = self._job.ready
        try:
            return ready.get_nowait()
        except queue.Empty:
            pass
        t0 = self._clock()
        while True:
            try:
                item = ready.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._feeder.alive() and ready.empty():
                    raise RuntimeError("dlfeed: the device feeder thread ended without a batch") from None
        t1 = self._clock()
        self._copier.consumer_waited_ns += t1 - t0
        self._copier.consumer_waits += 1
        if self._on_wait is not None:
            try:
                self._on_wait(t0, t1)
            except ValueError:  # the loader was closed: nothing to record into
                self._on_wait = None
        return item

    @property
    def feeder(self) -> threading.Thread:
        """The feeder thread."""
        return self._feeder.thread

    def close(self, finished: bool = False) -> None:
        """Drops the host batches not yet issued; the copies in flight finish (and are
        recorded) now, unless the epoch ``finished`` (then they go on behind the next one's)."""
        if self._closed:
            return
        self._closed = True
        self._more = False
        self._job.cancelled = True
        if self._handed:
            self._feeder.barrier()  # the feeder is done with this feed's batches
        while True:  # device batches not returned
            try:
                self._job.ready.get_nowait()
            except queue.Empty:
                break
        self._host = None
        if finished:
            self._copier.poll()
        else:
            self._copier.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: S110 - at interpreter exit torch may be gone; nothing to release then
            pass


def loader_feed(loader: Any, host: Iterable[Any]) -> DeviceFeed:
    """A dlfeed.Loader's device batches from its host batches ``host``: the loader's
    copier (made on first use, a CudaStream unless one was set; one for all epochs,
    so an epoch's end does not wait for its copies), its feeder thread (made on first
    use; stopped by close_loader or when the loader is collected), its counters
    (record_h2d, and the consumer's waits as stall), and DeviceBatch objects. A feed of
    the loader's still open is closed first: one epoch's batches run at a time."""
    from . import to_torch  # dlfeed.torch, which imports this module first

    core = loader._core
    copier = loader._copier
    if copier is None:
        loader._copier = copier = DeviceCopier(CudaStream(loader._device), loader._h2d_budget, core.record_h2d,
                                               core.counters_now)
    prev = loader._feed() if loader._feed is not None else None
    if prev is not None:
        prev.close()
    feeder = getattr(loader, "_feeder", None)
    if feeder is None:
        loader._feeder = feeder = Feeder(copier.ops)
        weakref.finalize(loader, feeder.stop)

    def convert(b: Any) -> Any:
        tensors = {name: to_torch(b, name) for name in b.keys()}
        return tensors, (b.epoch, b.index, b.position, b.sample_ids)

    def wrap(out: Dict[str, Any], info: Any) -> DeviceBatch:
        d = DeviceBatch(out)
        d.epoch, d.index, d.position, d.sample_ids = info
        return d

    record_wait = getattr(core, "record_wait", None)  # a build before it: the waits are in h2d_stats() only
    feed = DeviceFeed(host, convert, wrap, copier, feeder, loader._device_prefetch,
                      on_wait=record_wait, clock=core.counters_now)
    loader._feed = weakref.ref(feed)
    return feed


def close_loader(loader: Any) -> None:
    """A dlfeed.Loader's device side, at its close(): its open feed, its feeder thread,
    then the copies in flight (each finishes and is recorded)."""
    feed = loader._feed() if loader._feed is not None else None
    if feed is not None:
        feed.close()
    feeder = getattr(loader, "_feeder", None)
    if feeder is not None:
        loader._feeder = None
        feeder.stop()
    if loader._copier is not None:
        loader._copier.close()
        loader._copier.ops.close()
