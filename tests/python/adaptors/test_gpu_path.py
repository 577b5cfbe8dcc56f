# SPDX-License-Identifier: Apache-2.0
"""The GPU path on a machine without one (issue 28): device="cuda" is a clear error
everywhere, pin_memory=True warns and gives the same batches, the batch pool's
buffers are registered once each through the allocator hook (register/unregister
given as C function pointers, as the CUDA runtime's are), the h2d stage records into
the counters and onto a trace lane of its own, and held batches do not shrink the
read-ahead. Files are written by h5py; batches are checked byte for byte."""
import ctypes
import json
import threading

import h5py
import numpy as np
import pytest

import dlfeed

torch = pytest.importorskip("torch")

if torch.cuda.is_available():  # pragma: no cover - these check the CPU-only behaviour
    pytest.skip("a CUDA machine: the no-GPU behaviour is not what runs here", allow_module_level=True)

SHAPE = (64, 64, 64)  # 256 KiB uint8 samples: batch buffers are whole pages of their own


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    rng = np.random.default_rng(28)
    data = {}
    for k in range(3):
        x = rng.integers(0, 255, (12,) + SHAPE, dtype=np.uint8)
        y = rng.integers(0, 1000, 12, dtype=np.int64)
        with h5py.File(root / f"part_{k}.h5", "w") as h:
            h.create_dataset("image", data=x)
            h.create_dataset("label", data=y)
        data[k] = (x, y)
    xs = np.concatenate([data[k][0] for k in range(3)])
    ys = np.concatenate([data[k][1] for k in range(3)])
    return str(root), xs, ys


KW = dict(fields=["image", "label"], batch_size=4, strategy="global_shuffle", seed=5, resident="off")


def check_batch(b, xs, ys):
    ids = b.sample_ids.astype(np.int64)
    np.testing.assert_array_equal(b["image"], xs[ids])
    np.testing.assert_array_equal(b["label"], ys[ids])


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_device_cuda_without_cuda_is_a_clear_error(images, device):
    root, _, _ = images
    import dlfeed.tf
    import dlfeed.torch

    for make in (lambda: dlfeed.Loader(root, device=device, **KW),
                 lambda: dlfeed.torch.Dataset(root, device=device, **KW),
                 lambda: dlfeed.tf.dataset(root, device=device, **KW)):
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            make()
    with pytest.raises(ValueError, match="cuda"):
        dlfeed.Loader(root, device="meta", **KW)
    # Other values name device= (they were torch's or Python's own errors).
    with pytest.raises(ValueError, match="device='GPU': expected 'cuda', 'cuda:N' or 'cpu'"):
        dlfeed.Loader(root, device="GPU", **KW)
    with pytest.raises(TypeError, match="device=True: expected"):
        dlfeed.Loader(root, device=True, **KW)
    with pytest.raises(RuntimeError, match="device='cuda:0': CUDA is not available"):
        dlfeed.Loader(root, device=0, **KW)  # an index, as torch reads one
    with pytest.raises(ValueError, match="device='cuda:x': expected"):
        dlfeed.tf.dataset(root, device="cuda:x", **KW)
    # device="cpu" is host memory, as without device=.
    b = next(iter(dlfeed.Loader(root, device="cpu", **KW)))
    assert isinstance(b["image"], np.ndarray)


def test_pin_memory_without_cuda_warns_and_gives_the_same_batches(images):
    root, xs, ys = images
    with pytest.warns(RuntimeWarning, match="pin_memory=True ignored: CUDA is not available"):
        loader = dlfeed.Loader(root, pin_memory=True, **KW)
    assert not loader.pinned
    n = 0
    for b in loader:
        check_batch(b, xs, ys)
        n += len(b)
    assert n == len(xs)


class Registrar:
    """register(ptr, bytes, flags) / unregister(ptr) as C functions (ctypes), recording calls."""

    REG = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
    UNREG = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    def __init__(self):
        self.mu = threading.Lock()
        self.live = {}
        self.registered = []
        self.bad = []
        self.reg = self.REG(self._reg)
        self.unreg = self.UNREG(self._unreg)

    def _reg(self, p, n, flags):
        with self.mu:
            if p in self.live:
                self.bad.append(("twice", p))
            self.live[p] = n
            self.registered.append((p, n, flags))
        return 0

    def _unreg(self, p):
        with self.mu:
            if self.live.pop(p, None) is None:
                self.bad.append(("not registered", p))
        return 0

    def allocator(self):
        addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        return dlfeed._dlfeed.page_locked_allocator(addr(self.reg), addr(self.unreg))

    def covers(self, a):
        p, n = a.ctypes.data, a.nbytes
        with self.mu:
            return any(s <= p and p + n <= s + m for s, m in self.live.items())


def test_pool_buffers_are_registered_once_each_and_unregistered_before_freeing(images):
    root, xs, ys = images
    r = Registrar()
    alloc = r.allocator()
    loader = dlfeed.Loader(root, pin_memory=alloc, **KW)
    assert loader.pinned
    batches = 0
    for epoch in range(3):
        held = []
        for b in loader.iter_epoch(epoch):
            check_batch(b, xs, ys)
            # The images' buffer (1 MiB) is registered: what a copy to the GPU reads is page-locked.
            assert r.covers(b["image"]), "an image buffer that was never registered"
            held.append(b)
            del held[:-2]  # a consumer keeping two batches
            batches += 1
        del held, b
    assert batches == 27
    stats = loader.pin_stats()
    # Registered once per pool buffer, not per batch: the pool reuses them.
    assert 0 < stats["registered"] == len(r.registered) <= 16, stats
    assert all(n >= 256 * 1024 and flags == 1 for _, n, flags in r.registered)
    assert loader.stats()["pool_reuses"] > batches
    loader.close()
    del loader
    assert r.bad == []
    assert r.live == {}, "every registered buffer is unregistered before it is freed"
    assert alloc.unregistered == alloc.registered


def test_h2d_is_a_counters_stage_with_a_trace_lane(images, tmp_path):
    root, _, _ = images
    loader = dlfeed.Loader(root, trace=True, **KW)
    for b in loader:
        pass
    t0 = loader._core.counters_now()
    loader._core.record_h2d(t0, 2_000_000, 40_000_000, 0, 1)  # 40 MB in 2 ms: 20 GB/s
    loader._core.record_h2d(t0 + 2_000_000, 1_000_000, 40_000_000, 0, 2)
    c = loader.counters()
    assert c["counters"]["h2d_bytes"]["value"] == 80_000_000
    assert c["counters"]["h2d_ns"]["count"] == 2
    assert c["h2d"]["copies"] == 2 and c["h2d"]["bytes"] == 80_000_000
    assert c["h2d"]["gb_per_s"] == pytest.approx(80e6 / 3e-3 / 1e9, rel=0.02)
    path = tmp_path / "trace.json"
    loader.write_trace(path)
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    h2d = [e for e in events if e.get("name") == "h2d"]
    assert len(h2d) == 2
    lanes = {e["tid"] for e in h2d}
    assert len(lanes) == 1
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert names.get(lanes.pop()) == "dlfeed h2d"


def test_held_batches_do_not_shrink_the_read_ahead(images):
    root, _, _ = images
    # The policy's bytes have room for 3 batches (4 x 256 KiB images + labels each).
    room = 3 * (4 * 64 * 64 * 64 + 4096)
    seen = {}
    for hold in (0, 4):
        loader = dlfeed.Loader(root, prefetch=f"depth:16,budget:{room}", **KW)
        it = iter(loader)
        held = [next(it) for _ in range(hold)]
        import time

        until = time.time() + 10
        while loader.stats()["lookahead_batches"] < 3 and time.time() < until:
            time.sleep(0.001)
        seen[hold] = (loader.stats()["lookahead_batches"], loader.stats()["held_batches"])
        del held, it
        loader.close()
    assert seen == {0: (3, 0), 4: (3, 4)}
