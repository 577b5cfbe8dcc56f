#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Feeding the GPU (issue 28): the targets, measured side by side in one run.

    python bench/gpu_feed.py OUT_DIR            # a GPU machine: under 5 minutes, data included
    python bench/gpu_feed.py OUT_DIR --quick    # any machine: small data, under 2 minutes on a CPU

Data: ImageNet-like decoded tensors in HDF5 written by h5py (3x224x224 uint8 + an
int64 label; 16 files x 1,024 samples, 2.47 GB; --quick: 4 x 128), global shuffle,
batch 256 (--quick: 32). Cases, each a few seconds:

- cpu:        dlfeed.Loader, CPU only (io_engines = min(8, cores)): the CPU side's rate
- held_k:     the same, holding the last k batches (k = 0, 2, 4, 8): the loader must not starve
- h2d_raw:    torch copies of one batch's bytes, pageable and pinned: the link
- device:     dlfeed.Loader(device="cuda"): pinned pool, copies on their own stream
- torch_dev:  dlfeed.torch.Dataset(device="cuda")
- torch_dl:   PyTorch DataLoader + h5py, 8 workers, pin_memory=True, .cuda(non_blocking=True)
- cold_cat / cold_device: pages dropped (root), sequential read of the files vs dlfeed to the GPU
- boundary_off / boundary_on: CPU only, a sleep "step" per batch, one iter_epoch() per
              epoch; the consumer's wait per step at epoch boundaries and mid-epoch, with
              overlap_epochs off and on (the next epoch read while this one ends)
- au:         a 20 ms matmul step per batch on the GPU; AU = step time / wall time (and the
              waits at epoch boundaries and mid-epoch, the time in next(), and au_gpu_pct: the
              steps' GPU time by CUDA events / wall, which a step waiting on the device for its
              copy lowers); au_no_overlap: overlap_epochs=False; au_epochs: one iter_epochs()
- cpu_with_copy_load: the CPU-only loader while another thread copies a pinned batch-sized
              buffer to the GPU in a loop on its own stream (memory bandwidth shared?)
- consumer_overhead: the device feed from held files (resident="on") with a 5 ms sleep for
              the step: the consumer thread's time in next() per batch (median, p90) and its
              CPU time, the copies issued by the feeder thread
- consumer_overhead_host (also without CUDA): the same with HostStream (the tests' CPU
              stand-in, tests/python/adaptors/host_stream.py) for CUDA: the feed's structure
              runs, and its cost

Without CUDA the device cases are skipped, saying so, and the CPU cases run (the
held batches, pin_memory's warning, device="cuda"'s error). Writes
OUT_DIR/gpu_feed.json and OUT_DIR/gpu_feed.md.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any, Dict, List, Optional

import numpy as np

try:  # an installed dlfeed (the GPU machine: a wheel), else this checkout's build
    import dlfeed  # noqa: F401
except ImportError:
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.join(_root, "python"),
                    os.path.join(os.environ.get("DLFEED_BUILD_DIR", os.path.join(_root, "build")), "python")]

RES: List[Dict[str, Any]] = []
T0 = time.perf_counter()


def log(case: str, **kw: Any) -> Dict[str, Any]:
    kw = {"case": case, **kw, "t": round(time.perf_counter() - T0, 1)}
    RES.append(kw)
    print(json.dumps(kw), flush=True)
    return kw


def find(case: str) -> Dict[str, Any]:
    for r in RES:
        if r["case"] == case and "error" not in r:
            return r
    return {}


#: Cases starting after this many seconds are skipped (the whole run stays under 5 minutes).
DEADLINE_S = 250.0


#: Called after each case (main sets it): the results so far are on disk should a later case hang.
CHECKPOINT: List[Any] = []


#: --cases: run only these (empty: all).
ONLY: List[str] = []


def safe(fn):
    def wrap(case: str, *a: Any, **k: Any) -> Dict[str, Any]:
        if ONLY and case not in ONLY:
            return {}
        if time.perf_counter() - T0 > DEADLINE_S:
            return log(case, error=f"skipped: the run passed {DEADLINE_S:.0f} s")
        try:
            r = fn(case, *a, **k)
        except Exception as e:  # one failing case must not end the run
            r = log(case, error=f"{type(e).__name__}: {str(e)[:400]}")
        for f in CHECKPOINT:
            try:
                f()
            except Exception as e:  # noqa: BLE001 - a checkpoint that fails ends nothing
                print(f"checkpoint: {type(e).__name__}: {e}", flush=True)
        return r
    return wrap


def drop_caches() -> bool:
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def make_data(folder: str, files: int, per: int) -> List[str]:
    import h5py

    os.makedirs(folder, exist_ok=True)
    paths = []
    for k in range(files):
        p = os.path.join(folder, f"part_{k:03d}.h5")
        paths.append(p)
        if os.path.exists(p):
            try:
                with h5py.File(p, "r") as h:
                    if h["image"].shape == (per, 3, 224, 224):
                        continue
            except (OSError, KeyError):
                pass
        rng = np.random.default_rng(k)
        with h5py.File(p, "w") as h:
            h.create_dataset("image", data=rng.integers(0, 255, (per, 3, 224, 224), dtype=np.uint8))
            h.create_dataset("label", data=rng.integers(0, 1000, (per,), dtype=np.int64))
    return paths


def warm(paths: List[str]) -> None:
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(64 << 20):
                pass


SAMPLE = 3 * 224 * 224 + 8


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        import torch

        self.torch = torch
        self.quick = a.quick
        self.cuda = torch.cuda.is_available() and not a.cpu
        self.data = os.path.join(a.data, "img")
        self.files, self.per = (4, 128) if a.quick else (16, 1024)
        self.batch = 32 if a.quick else 256
        self.limit = 1.0 if a.quick else a.seconds
        self.engines = min(8, os.cpu_count() or 2)

    def loader(self, **kw: Any) -> Any:
        import dlfeed

        return dlfeed.Loader(self.data, fields=["image", "label"], batch_size=self.batch, strategy="global_shuffle",
                             seed=3, io_engines=self.engines, **kw)

    def run_loader(self, case: str, hold: int = 0, device: Optional[str] = None, skip: int = 0,
                   epochs: int = 1000, limit: Optional[float] = None, cold: bool = False, load: Any = None,
                   **kw: Any) -> Dict[str, Any]:
        """Iterate (epochs or limit seconds); the first `skip` batches are not timed (pool warm-up).
        `load`: started before and stopped after the timed loop (its stop() result is logged)."""
        limit = self.limit if limit is None else limit
        L = self.loader(device=device, **kw)
        dropped = drop_caches() if cold else None
        held: collections.deque = collections.deque()
        n = b = 0
        seen = 0
        if load is not None:
            load.start()
        t = time.perf_counter()
        done = False
        for e in range(epochs):
            it = L.iter_epoch(e)
            for batch in it:
                seen += 1
                if seen == skip:
                    n = b = 0
                    t = time.perf_counter()
                    continue
                x = batch["image"]
                n += int(x.shape[0])
                b += int(x.shape[0]) * SAMPLE
                held.append(batch)
                while len(held) > hold:
                    held.popleft()
                del batch, x
                if time.perf_counter() - t > limit:
                    done = True
                    break
            if done:
                break
        if hasattr(it, "close"):
            it.close()  # a device epoch left early: its copies finish and are recorded now
        if device is not None:
            self.torch.cuda.synchronize()
        s = time.perf_counter() - t
        if load is not None:
            extra_load = {"load": load.stop()}
        else:
            extra_load = {}
        held.clear()
        st = L.stats()
        extra = {"h2d": L.h2d_stats(), "pin": L.pin_stats()} if device is not None else {}
        c = L.counters()
        L.close()
        return log(case, samples_s=round(n / s), gb_s=round(b / s / 1e9, 3), samples=n, seconds=round(s, 2),
                   hold=hold, device=device, cold=cold, dropped=dropped, io_engines=st["io_engines"],
                   route=st["route"], pool_allocations=st["pool_allocations"], au=_au(c), **extra, **extra_load)

    # -- CPU parts --------------------------------------------------------------
    def cpu_cases(self) -> None:
        safe(self.run_loader)("cpu", skip=2)
        for k in (0, 2, 4, 8):
            safe(self.run_loader)(f"held_{k}", hold=k, skip=2)
        safe(self.run_loader)("held_0_again", hold=0, skip=2)  # the first k=0 ran on a cooler machine
        safe(self.no_cuda_behaviour)("no_cuda")
        safe(self.boundary)("boundary_off", False)
        safe(self.boundary)("boundary_on", True)
        # The device feed's structure on the CPU (HostStream for CUDA): it runs, and what it costs.
        safe(self.consumer_overhead)("consumer_overhead_host", host=True)

    def boundary(self, case: str, overlap: bool) -> Dict[str, Any]:
        """CPU: the consumer's wait for each batch (the time in next()) while a sleep stands for
        the step, one iter_epoch() per epoch as a training loop writes it."""
        step = 0.010 if self.quick else 0.020
        L = self.loader(overlap_epochs=overlap, resident="off")  # read through the engines, as the GPU run does
        per_epoch = L.batches_per_epoch
        epochs = 3 if self.quick else 4
        at_start: List[float] = []
        mid: List[float] = []
        for e in range(epochs):
            it = L.iter_epoch(e)
            first = True
            while True:
                t = time.perf_counter()
                batch = next(it, None)
                w = time.perf_counter() - t
                if batch is None:
                    break
                if e > 0 or not first:  # epoch 0's first batch is the pipeline's cold start
                    (at_start if first else mid).append(w)
                first = False
                time.sleep(step)
                del batch
        L.close()
        ms = lambda v: round(1000 * statistics.median(v), 3) if v else None  # noqa: E731
        return log(case, overlap_epochs=overlap, step_ms=step * 1000, epochs=epochs,
                   wait_ms_epoch_start=ms(at_start), wait_ms_epoch_start_max=round(1000 * max(at_start), 3)
                   if at_start else None, wait_ms_mid=ms(mid), batches_per_epoch=per_epoch)

    def no_cuda_behaviour(self, case: str) -> Dict[str, Any]:
        """What a CPU-only machine does with device= and pin_memory=."""
        import dlfeed
        import dlfeed.torch

        if self.torch.cuda.is_available():
            return log(case, skipped="CUDA is available here")
        msg = ""
        try:
            dlfeed.torch.Dataset(self.data, fields=["image", "label"], batch_size=self.batch, device="cuda")
        except RuntimeError as e:
            msg = str(e)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            L = self.loader(pin_memory=True)
            first = next(iter(L))
            ok = first["image"].shape[0] == self.batch
            L.close()
        warned = [str(x.message) for x in w if "pin_memory" in str(x.message)]
        return log(case, device_error=msg, pin_warning=warned[:1], pin_batches_ok=bool(ok))

    # -- device parts -------------------------------------------------------------
    def h2d_raw(self, case: str) -> Dict[str, Any]:
        torch = self.torch
        nb = self.batch * SAMPLE
        out = {}
        for pinned in (False, True):
            src = torch.empty(nb, dtype=torch.uint8, pin_memory=pinned)
            src.fill_(1)
            for _ in range(3):
                src.cuda(non_blocking=pinned)
            torch.cuda.synchronize()
            k = 40
            t = time.perf_counter()
            for _ in range(k):
                g = src.cuda(non_blocking=pinned)
            torch.cuda.synchronize()
            out["pinned" if pinned else "pageable"] = round(nb * k / (time.perf_counter() - t) / 1e9, 2)
            del g, src
        return log(case, gb_s=out["pinned"], pageable_gb_s=out["pageable"], mb=round(nb / 1e6, 1))

    def torch_dataset(self, case: str) -> Dict[str, Any]:
        import dlfeed.torch

        ds = dlfeed.torch.Dataset(self.data, fields=["image", "label"], batch_size=self.batch,
                                  strategy="global_shuffle", seed=3, io_engines=self.engines, device="cuda")
        n = seen = 0
        t = time.perf_counter()
        while True:
            for x, y in ds:
                seen += 1
                if seen == 8:
                    n, t = 0, time.perf_counter()
                    continue
                n += int(x.shape[0])
                if time.perf_counter() - t > self.limit:
                    break
            else:
                continue
            break
        self.torch.cuda.synchronize()
        s = time.perf_counter() - t
        on = str(x.device)
        ds.loader.close()
        return log(case, samples_s=round(n / s), gb_s=round(n * SAMPLE / s / 1e9, 3), tensor_device=on)

    def torch_dl(self, case: str, workers: int, cold: bool = False) -> Dict[str, Any]:
        torch = self.torch
        ds = H5Images(self.data)
        dl = torch.utils.data.DataLoader(ds, batch_size=self.batch, shuffle=True, num_workers=workers,
                                         pin_memory=self.cuda, prefetch_factor=4 if workers else None)
        if cold:
            drop_caches()
        n = 0
        it = iter(dl)
        t = time.perf_counter()
        for x, y in it:
            if self.cuda:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            n += int(x.shape[0])
            if time.perf_counter() - t > self.limit:
                break
        if self.cuda:
            torch.cuda.synchronize()
        s = time.perf_counter() - t
        del it, dl
        return log(case, samples_s=round(n / s), gb_s=round(n * SAMPLE / s / 1e9, 3), workers=workers, cold=cold)

    def cold_cat(self, case: str) -> Dict[str, Any]:
        if not drop_caches():
            return log(case, skipped="cannot drop the page cache (not root): cold cases skipped")
        t = time.perf_counter()
        tot = 0
        for f in sorted(os.listdir(self.data)):
            with open(os.path.join(self.data, f), "rb", buffering=0) as fh:
                while True:
                    chunk = fh.read(8 << 20)
                    if not chunk:
                        break
                    tot += len(chunk)
        s = time.perf_counter() - t
        return log(case, gb_s=round(tot / s / 1e9, 3), gb=round(tot / 1e9, 2))

    def au(self, case: str, overlap: Optional[bool] = None, continuous: bool = False) -> Dict[str, Any]:
        """20 ms of GPU work per step (a matmul loop), the loader alone much faster. One
        iter_epoch(e) per epoch (overlap_epochs as given; None: the default, on with device=),
        or `continuous`: one iter_epochs() over all of them.

        au_pct: the steps' time on the host (from the batch in hand to the loss's .item()) over
        the wall time, as DLIO counts AU. A step whose stream waits on the device for its
        batch's copy looks longer, not waiting, on the host's clock; so the GPU's own time for
        each step is timed too (CUDA events from the step's start, which the device passes only
        once the copy is done, to its loss): au_gpu_pct is that over the same wall time, and
        host_minus_gpu_ms what the host's step had on top of the GPU's (launch and .item()
        latency, plus any wait for a copy)."""
        torch = self.torch
        a = torch.randn(2048, 2048, device="cuda")
        for _ in range(5):  # cuBLAS's first calls are not what a step costs
            a = (a @ a) * 1e-3
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            a = (a @ a) * 1e-3
        torch.cuda.synchronize()
        per = (time.perf_counter() - t) / 20
        reps = max(1, round(0.020 / per))
        L = self.loader(device="cuda", overlap_epochs=overlap)
        steps = 0
        step_s = 0.0
        t_start = None
        limit = max(self.limit, 4.0)
        waits: Dict[str, List[float]] = {"start": [], "mid": []}
        in_next: List[float] = []
        host_steps: List[float] = []
        events: List[Any] = []
        t_end = None
        epochs = [0]

        def stream() -> Any:
            """(batch, whether it is its epoch's first)."""
            if continuous:
                prev = None
                for b in L.iter_epochs():
                    yield b, b.epoch != prev
                    prev = b.epoch
                    epochs[0] = b.epoch + 1
                return
            while True:
                first = True
                for b in L.iter_epoch(epochs[0]):
                    yield b, first
                    first = False
                epochs[0] += 1

        it = stream()
        while True:
            t_ask = time.perf_counter()
            batch, first = next(it)
            t0 = time.perf_counter()
            if t_end is not None and t_start is not None:
                waits["start" if first else "mid"].append(t0 - t_end)  # from the last step's end
                if not first:
                    in_next.append(t0 - t_ask)
            if steps == 5:
                t_start, step_s = t0, 0.0  # the first steps warm the pool
            timed = t_start is not None
            with L.compute():
                if timed:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                x = batch["image"]
                z = a
                for _ in range(reps):
                    z = (z @ a) * 1e-3
                loss = z.sum() + x[0, 0, 0, 0].float()
                if timed:
                    e1.record()
                float(loss.item())  # the step ends as a loss.item() does
            t_end = time.perf_counter()
            step_s += t_end - t0
            steps += 1
            if timed:
                events.append((e0, e1))
                host_steps.append(t_end - t0)
            del batch, x
            if t_start is not None and time.perf_counter() - t_start > limit:
                break
        wall = time.perf_counter() - t_start
        it.close()  # the device epoch left early: its copies finish and are recorded now
        torch.cuda.synchronize()
        gpu = [e0.elapsed_time(e1) / 1000 for e0, e1 in events]
        extra = [h - g for h, g in zip(host_steps, gpu)]
        c = L.counters()
        h2d = L.h2d_stats()
        L.close()
        cpu = find("cpu").get("samples_s")
        step = step_s / max(1, steps - 5)
        ms = lambda v: round(1000 * statistics.median(v), 3) if v else None  # noqa: E731
        return log(case, au_pct=round(100 * step_s / wall, 2), au_gpu_pct=round(100 * sum(gpu) / wall, 2),
                   counters_au=_au(c), step_ms=round(1000 * step, 2), gpu_step_ms=ms(gpu),
                   host_minus_gpu_ms=ms(extra), host_minus_gpu_ms_max=round(1000 * max(extra), 3) if extra else None,
                   steps=steps - 5, matmul_reps=reps, epochs=epochs[0], overlap_epochs=overlap,
                   continuous=continuous,
                   loader_x_faster=round(step / (self.batch / cpu), 1) if cpu else None,
                   wait_ms_epoch_start=ms(waits["start"]), wait_ms_epoch_start_max=round(1000 * max(waits["start"]),
                   3) if waits["start"] else None, wait_ms_mid=ms(waits["mid"]), next_ms_mid=ms(in_next),
                   wait_s_total=round(sum(waits["start"]) + sum(waits["mid"]), 3),
                   consumer_waits=h2d.get("consumer_waits"), consumer_waited_ms=round(h2d.get(
                       "consumer_waited_ns", 0) / 1e6, 3))

    def consumer_overhead(self, case: str, host: bool = False) -> Dict[str, Any]:
        """The device feed's cost on the consumer's thread: the time inside next() per batch (and
        the thread's CPU time in it), with the files held in memory (resident="on": reads cost
        little) and a 5 ms sleep standing for the step (the GIL released, as a step waiting on
        the GPU releases it), so the feeder thread runs while the consumer "trains". `host`: on
        the CPU, the tests' HostStream standing in for CUDA (the structure's cost, not a GPU's)."""

        step = 0.005
        L = self.loader(device=None if host else "cuda", resident="on", memory_budget=8 << 30,
                        overlap_epochs=True)  # the 2.47 GB held: a budget over twice it
        if host:
            from dlfeed.torch._device import DeviceCopier

            # The CPU stand-in for CUDA is test code, not the package's: from the checkout's tests.
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                                            "python", "adaptors"))
            from host_stream import HostStream

            core = L._core
            L._copier = DeviceCopier(HostStream(), L._h2d_budget, core.record_h2d, core.counters_now)
            L._device = "host stand-in"  # iter_epoch takes the device path, through the copier set above
        in_next: List[float] = []
        cpu = 0.0
        seen = e = 0
        t_start = None
        done = False
        while not done:
            it = L.iter_epoch(e)
            while True:
                t, c = time.perf_counter(), time.thread_time()
                batch = next(it, None)
                w, cw = time.perf_counter() - t, time.thread_time() - c
                if batch is None:
                    break
                seen += 1
                if seen > 8:  # the first batches warm the pool
                    in_next.append(w)
                    cpu += cw
                    t_start = t_start or t
                del batch
                time.sleep(step)
                if t_start is not None and time.perf_counter() - t_start > self.limit:
                    done = True
                    break
            it.close()
            e += 1
        wall = time.perf_counter() - (t_start or time.perf_counter())
        if not host:
            self.torch.cuda.synchronize()
        h2d = L.h2d_stats()
        st = L.stats()
        L.close()
        n = max(1, len(in_next))
        us = sorted(1e6 * x for x in in_next) or [0.0]
        return log(case, host_stand_in=host, batches=len(in_next), step_ms=step * 1000,
                   next_us_median=round(statistics.median(us), 1), next_us_p90=round(us[int(0.9 * (len(us) - 1))], 1),
                   next_us_mean=round(sum(us) / n, 1), consumer_cpu_us_per_batch=round(1e6 * cpu / n, 1),
                   samples_s=round(len(in_next) * self.batch / wall) if wall else None,
                   resident_bytes=st.get("resident_bytes"), h2d=h2d)

    def cpu_with_copy_load(self, case: str) -> Dict[str, Any]:
        """The CPU-only loader while a thread copies a pinned batch-sized buffer to the GPU on its own
        stream in a loop (at the link's rate): does the GPU's DMA reading host memory slow the loader?"""
        return self.run_loader(case, skip=2, load=CopyLoad(self.torch, self.batch * SAMPLE))

    def device_cases(self) -> None:
        safe(self.h2d_raw)("h2d_raw")
        safe(self.run_loader)("device", device="cuda", skip=8)
        safe(self.cpu_with_copy_load)("cpu_with_copy_load")
        safe(self.run_loader)("cpu_again", skip=2)  # the CPU-only rate beside it, on the same warm machine
        safe(self.consumer_overhead)("consumer_overhead")  # the copies issued by the feeder thread
        safe(self.torch_dataset)("torch_dev")
        safe(self.torch_dl)("torch_dl_w8", 8)
        safe(self.au)("au")  # one iter_epoch() per epoch, overlap_epochs on (device='s default)
        safe(self.au)("au_no_overlap", overlap=False)  # the same with the next epoch read only when asked
        safe(self.au)("au_epochs", continuous=True)  # one iter_epochs(): copies go on across the boundaries
        r = safe(self.cold_cat)("cold_cat")
        if "gb_s" in r:
            safe(self.run_loader)("cold_device", device="cuda", epochs=1, limit=120, cold=True, resident="off")
            safe(self.run_loader)("cold_cpu", epochs=1, limit=120, cold=True, resident="off")


class CopyLoad:
    """A thread copying one pinned buffer to the GPU on a stream of its own, without pause."""

    def __init__(self, torch: Any, nbytes: int) -> None:
        import threading

        self.torch = torch
        self.src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self.src.fill_(1)
        self.dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        self.stream = torch.cuda.Stream()
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.copies = 0
        self.seconds = 0.0

    def run(self) -> None:
        torch = self.torch
        t = time.perf_counter()
        with torch.cuda.stream(self.stream):
            while not self.stop_flag.is_set():
                for _ in range(4):
                    self.dst.copy_(self.src, non_blocking=True)
                self.stream.synchronize()  # releases the GIL while the copies run
                self.copies += 4
        self.seconds = time.perf_counter() - t

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> Dict[str, Any]:
        self.stop_flag.set()
        self.thread.join()
        n = self.src.numel()
        return {"copies": self.copies, "gb_s": round(self.copies * n / max(self.seconds, 1e-9) / 1e9, 2)}


class H5Images:
    """What a PyTorch user writes: open per worker, one sample per __getitem__."""

    def __init__(self, folder: str) -> None:
        import h5py

        self.paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".h5"))
        with h5py.File(self.paths[0], "r") as h:
            self.per = h["image"].shape[0]
        self.h: Optional[List[Any]] = None

    def __len__(self) -> int:
        return len(self.paths) * self.per

    def __getitem__(self, i: int) -> Any:
        import h5py
        import torch

        if self.h is None:
            self.h = [h5py.File(p, "r") for p in self.paths]
        f, j = divmod(i, self.per)
        return torch.from_numpy(self.h[f]["image"][j]), int(self.h[f]["label"][j])


def _au(c: Dict[str, Any]) -> Optional[float]:
    try:
        return c["total"]["au_percent"]
    except (KeyError, TypeError):
        return None


def targets(cuda: bool) -> List[Dict[str, Any]]:
    """The issue's targets from the results (None: not measured)."""
    out = []

    def ratio(name: str, got: Optional[float], want: Optional[float], note: str) -> None:
        out.append({"target": name, "value": None if got is None else round(got, 3), "want": want,
                    "met": None if got is None or want is None else got >= want, "note": note})

    cpu, dev, raw = find("cpu"), find("device"), find("h2d_raw")
    h0 = [find("held_0").get("samples_s"), find("held_0_again").get("samples_s")]
    h0 = [x for x in h0 if x]
    h8 = find("held_8").get("samples_s")
    ratio("8 held / none (CPU-only loader)", h8 / statistics.median(h0) if h8 and h0 else None, 0.9,
          "median of the two k=0 runs")
    if dev and cpu and raw:
        ratio("GPU delivered / min(CPU-only, pinned copy)", dev["gb_s"] / min(cpu["gb_s"], raw["gb_s"]), 0.9,
              f"CPU-only {cpu['gb_s']} GB/s, pinned copy {raw['gb_s']} GB/s, delivered {dev['gb_s']} GB/s")
    else:
        ratio("GPU delivered / min(CPU-only, pinned copy)", None, 0.9, "no CUDA" if not cuda else "a case failed")
    tdl = find("torch_dl_w8")
    ratio("dlfeed to GPU / DataLoader+h5py w8 pin_memory", dev["samples_s"] / tdl["samples_s"]
          if dev and tdl.get("samples_s") else None, 5.0, "")
    cc, cd = find("cold_cat"), find("cold_device")
    ratio("cold: to GPU / sequential read", cd["gb_s"] / cc["gb_s"] if cd and cc.get("gb_s") else None, 0.9,
          cc.get("skipped", ""))
    au = find("au")
    ratio("AU, 20 ms GPU step", au.get("au_pct"), 99.0, f"counters' AU {au.get('counters_au')}; on the GPU's clock "
          f"{au.get('au_gpu_pct')}; wait ms at an epoch's start {au.get('wait_ms_epoch_start')}, mid-epoch "
          f"{au.get('wait_ms_mid')} (in next() {au.get('next_ms_mid')}); loader {au.get('loader_x_faster')}x "
          "faster than the step" if au else "")
    for k, what in (("au_no_overlap", "overlap_epochs=False"), ("au_epochs", "one iter_epochs()")):
        r = find(k)
        ratio(f"AU, 20 ms GPU step, {what}", r.get("au_pct"), 99.0, f"wait ms at an epoch's start "
              f"{r.get('wait_ms_epoch_start')}, mid-epoch {r.get('wait_ms_mid')}" if r else "")
    # Diagnostics (no target): why delivery to the GPU may fall short of the CPU-only rate.
    load, again = find("cpu_with_copy_load"), find("cpu_again")
    ratio("diagnostic: CPU-only with a copy loop beside it / CPU-only", load["gb_s"] / again["gb_s"]
          if load and again.get("gb_s") else None, None, f"copy loop {load.get('load')}" if load else "")
    ratio("diagnostic: AU on the GPU's clock (steps' GPU time / wall)", au.get("au_gpu_pct"), None,
          f"host step minus GPU step, median {au.get('host_minus_gpu_ms')} ms, max {au.get('host_minus_gpu_ms_max')}"
          if au else "")
    for k, what in (("consumer_overhead", "feeder thread"),
                    ("consumer_overhead_host", "CPU, HostStream for CUDA, feeder thread")):
        co = find(k)
        ratio(f"diagnostic: {k}: us in next() per batch (median; {what})", co.get("next_us_median"), None,
              f"p90 {co.get('next_us_p90')} us, consumer CPU {co.get('consumer_cpu_us_per_batch')} us per batch"
              if co else "")
    for k in ("boundary_off", "boundary_on"):
        r = find(k)
        ratio(f"diagnostic: {k}: wait ms at an epoch's start (median)", r.get("wait_ms_epoch_start"), None,
              f"mid-epoch {r.get('wait_ms_mid')} ms" if r else "")
    return out


def write(out_dir: str, cuda: bool, skipped: str, quiet: bool = False) -> None:
    tg = targets(cuda)
    with open(os.path.join(out_dir, "gpu_feed.json"), "w") as f:
        json.dump({"results": RES, "targets": tg, "skipped": skipped}, f, indent=1)
    lines = ["# bench/gpu_feed.py", ""]
    info = find("info")
    lines.append(f"Machine: {info.get('gpu', 'no GPU')}, {info.get('cores')} cores, {info.get('mem_gib')} GiB; "
                 f"torch {info.get('torch')}; total {time.perf_counter() - T0:.0f} s." + (f" {skipped}" if skipped
                                                                                         else ""))
    lines += ["", "| target | value | want | met | note |", "|---|---|---|---|---|"]
    for t in tg:
        want = f">= {t['want']}" if t["want"] is not None else ""
        lines.append(f"| {t['target']} | {t['value']} | {want} | {t['met']} | {t['note']} |")
    lines += ["", "| case | samples/s | GB/s | details |", "|---|---|---|---|"]
    for r in RES:
        if r["case"] in ("info", "data"):
            continue
        rest = {k: v for k, v in r.items() if k not in ("case", "samples_s", "gb_s", "t")}
        lines.append(f"| {r['case']} | {r.get('samples_s', '')} | {r.get('gb_s', '')} | {json.dumps(rest)} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "gpu_feed.md"), "w") as f:
        f.write(text)
    if not quiet:
        print("\n" + text, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="small data; the device parts only where CUDA is")
    ap.add_argument("--cpu", action="store_true", help="skip the device parts even where CUDA is")
    ap.add_argument("--data", default="/tmp/gf28")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per timed case (not --quick)")
    ap.add_argument("--cases", default="", help="comma-separated case names: run only these (e.g. au,au_epochs)")
    a = ap.parse_args()
    ONLY[:] = [c for c in a.cases.split(",") if c]
    os.makedirs(a.out, exist_ok=True)
    import dlfeed
    import torch

    b = Bench(a)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    log("info", cores=os.cpu_count(), cuda=b.cuda, torch=torch.__version__, dlfeed=getattr(dlfeed, "__version__", "?"),
        gpu=torch.cuda.get_device_name(0) if b.cuda else None, mem_gib=round(mem, 1), quick=a.quick)
    t = time.perf_counter()
    paths = make_data(b.data, b.files, b.per)
    warm(paths)
    log("data", files=b.files, samples=b.files * b.per, gb=round(b.files * b.per * SAMPLE / 1e9, 2),
        seconds=round(time.perf_counter() - t, 1))
    CHECKPOINT.append(lambda: write(a.out, b.cuda, "(partial: the cases so far)", quiet=True))
    b.cpu_cases()
    write(a.out, b.cuda, "(the CPU parts so far)")
    skipped = ""
    if b.cuda:
        warm(paths)
        b.device_cases()
    else:
        skipped = ("No CUDA here: the device parts (h2d copies, delivery to the GPU, DataLoader to the GPU, "
                   "cold, AU) were skipped.")
        print(skipped, flush=True)
        safe(b.torch_dl)("torch_dl_w2_cpu", 2)
    write(a.out, b.cuda, skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
