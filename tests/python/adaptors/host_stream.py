# SPDX-License-Identifier: Apache-2.0
"""HostStream: the CPU stand-in for dlfeed.torch._device.CudaStream (a StreamOps), so
the device feed (DeviceCopier, Feeder, DeviceFeed) runs without CUDA: in
test_device_feed.py and in ``bench/gpu_feed.py --quick`` (which imports this file
from here by path). Test-only: the package ships CudaStream alone.

    loader = dlfeed.Loader(root, ...)
    loader._copier = DeviceCopier(HostStream(delay_s), budget, core.record_h2d, core.counters_now)
    for d in loader._device_epoch(...): ...
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any, Dict, Tuple


class _HostEvent:
    """HostStream's event: set when its copy has finished, with the time it did."""

    __slots__ = ("flag", "ns")

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.ns = 0


class HostStream:
    """CudaStream's stand-in on the CPU (no CUDA there): each copy is a real copy into
    new host tensors, made in order on a thread of its own (the copy engine) after
    ``delay_s`` (a slow link); its events are set when the copy has finished;
    hand_over() waits for it. The feeder, the copier's budget and the hand-over order
    run as they do with CUDA."""

    def __init__(self, delay_s: float = 0.0) -> None:
        import torch

        self.torch = torch
        self.delay_s = float(delay_s)
        self.jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.thread = threading.Thread(target=_host_copies, args=(self.jobs, torch, self.delay_s),
                                       name="dlfeed-host-stream", daemon=True)
        self.thread.start()
        weakref.finalize(self, self.jobs.put, None)  # collected unclosed: the copy thread ends too

    def enter_thread(self) -> None:
        pass

    def copy(self, tensors: Dict[str, Any], timed: bool) -> Tuple[Dict[str, Any], Any, Any]:
        # As a DMA engine reads registered memory: by address, owning nothing; the
        # copier must keep the host batch until the copy is done (else its bytes
        # may be a later batch's by the time they are read).
        pairs = []
        out = {k: [self.torch.empty_like(x) for x in t] if isinstance(t, list) else self.torch.empty_like(t)
               for k, t in tensors.items()}
        for k, t in tensors.items():
            for src, dst in zip(t if isinstance(t, list) else [t], out[k] if isinstance(t, list) else [out[k]]):
                if not src.is_contiguous():
                    raise ValueError("HostStream copies contiguous tensors only")
                pairs.append((src.data_ptr(), src.numel() * src.element_size(), dst))
        start = _HostEvent() if timed else None
        done = _HostEvent()
        self.jobs.put((pairs, start, done))
        return out, start, done

    def finished(self, done: Any) -> bool:
        return done.flag.is_set()

    def wait(self, done: Any) -> None:
        done.flag.wait()

    def elapsed_ns(self, start: Any, done: Any) -> int:
        return done.ns - start.ns

    def hand_over(self, out: Dict[str, Any], done: Any) -> None:
        done.flag.wait()

    def close(self) -> None:
        """The loader's close(): the copy thread ends."""
        self.jobs.put(None)
        self.thread.join()


def _host_copies(jobs: "queue.SimpleQueue[Any]", torch: Any, delay_s: float) -> None:
    """HostStream's copy thread (no reference to the HostStream: dropping it ends the thread)."""
    import ctypes  # the stand-in reads memory by address, as a DMA engine does

    while True:
        job = jobs.get()
        if job is None:
            return
        pairs, start, done = job
        if start is not None:
            start.ns = time.perf_counter_ns()
        if delay_s:
            time.sleep(delay_s)
        for address, nbytes, dst in pairs:
            if nbytes:
                raw = (ctypes.c_uint8 * nbytes).from_address(address)
                dst.view(-1).view(torch.uint8).copy_(torch.frombuffer(raw, dtype=torch.uint8))
        del job, pairs
        done.ns = time.perf_counter_ns()
        done.flag.set()
