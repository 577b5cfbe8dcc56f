# SPDX-License-Identifier: Apache-2.0
"""The Python loader used from several threads and iterators, as outside testing did:
close() from another thread while the main one iterates (was a crash or a hang), a daemon
thread inside next() when the interpreter exits (was an abort), an iterator of an
epoch another one superseded (was the newer epoch's batches, silently), and an error naming
a file whose name is not UTF-8 (was a UnicodeDecodeError in its place). Files by numpy."""
import os
import subprocess
import sys

import numpy as np
import pytest

import dlfeed


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("threads")
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.integers(0, 255, (64, 256, 256), dtype=np.uint8))  # 64 KiB samples
    np.save(d / "y.npy", np.arange(64, dtype=np.int64))
    return d


def run(script, data, timeout=60):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", script, str(data)], capture_output=True, text=True,
                          timeout=timeout, env=env)


CLOSE_FROM_ANOTHER_THREAD = r"""
import sys, threading, time
import dlfeed
L = dlfeed.Loader(sys.argv[1], fields=["x", "y"], batch_size=4, memory_budget=4 * 65536 * 2, resident="off")
started = threading.Event()
def closer():
    started.wait()
    time.sleep(0.05)
    L.close()
threading.Thread(target=closer).start()
n, why = 0, None
try:
    for e in range(100000):
        for b in L.iter_epoch(e):
            n += 1
            started.set()
except ValueError as ex:
    why = str(ex)
print("batches", n, "then", why, flush=True)
"""


def test_close_from_another_thread_while_iterating_ends_the_iteration_cleanly(data):
    for _ in range(5):  # the race was lost 8 times in 14 runs
        proc = run(CLOSE_FROM_ANOTHER_THREAD, data)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "then the loader is closed" in proc.stdout, proc.stdout


DAEMON_PRODUCER = r"""
import queue, sys, threading
import dlfeed
L = dlfeed.Loader(sys.argv[1], fields=["x", "y"], batch_size=4)
q = queue.Queue(maxsize=4)
def producer():  # a background prefetch thread, left running at exit
    while True:
        for b in L:
            q.put(int(b["y"][0]))
threading.Thread(target=producer, daemon=True).start()
for _ in range(20):
    q.get()
print("main done", flush=True)
"""


DAEMON_CREATOR = r"""
import sys, threading, time
import dlfeed
def creator():  # making loaders (and asking io_uring) as the interpreter exits
    while True:
        dlfeed.Loader(sys.argv[1], fields=["x", "y"], batch_size=4).close()
        dlfeed.io_uring_available()
threading.Thread(target=creator, daemon=True).start()
time.sleep(0.2)
print("main done", flush=True)
"""


# A daemon thread inside next(), or making a loader (Loader() took the GIL
# back in a destructor: at exit, ending the thread there ended the process
# with std::terminate, about half the runs), as the interpreter exits.
@pytest.mark.parametrize("script,runs", [(DAEMON_PRODUCER, 3), (DAEMON_CREATOR, 6)], ids=["next", "create"])
def test_a_daemon_thread_at_exit_does_not_abort(data, script, runs):
    for _ in range(runs):
        proc = run(script, data)
        assert proc.returncode == 0 and "terminate called" not in proc.stderr, (proc.returncode, proc.stderr[-2000:])
        assert "main done" in proc.stdout


def test_an_iterator_superseded_by_a_newer_epoch_raises(data):
    loader = dlfeed.Loader(str(data), fields=["y"], batch_size=8, strategy="global_shuffle", seed=1)
    a = loader.iter_epoch(0)
    first = next(a)
    b = loader.iter_epoch(1)
    with pytest.raises(RuntimeError, match="iterator of epoch 0 was superseded"):
        next(a)
    got = sorted(int(v) for batch in b for v in batch["y"])
    assert got == list(range(64)), "epoch 1's own iterator delivers all of it"
    # Nested loops over one loader: the outer one is told, not ended early.
    with pytest.raises(RuntimeError, match="superseded"):
        for _ in loader:
            for _ in loader:
                pass
    # restore() supersedes the running epoch's iterator too.
    c = loader.iter_epoch(2)
    next(c)
    loader.restore(loader.state())
    with pytest.raises(RuntimeError, match="superseded"):
        next(c)
    assert len(first["y"]) == 8
    loader.close()


def test_an_error_naming_a_file_whose_name_is_not_utf8_is_a_dlfeed_error(tmp_path):
    d = os.fsencode(tmp_path / "names")
    os.makedirs(d)
    np.save(os.fsdecode(os.path.join(d, b"ok.npy")), np.zeros((10, 4), np.uint8))
    with open(os.path.join(d, b"\xc6bad.npy"), "wb") as f:
        f.write(b"not an npy")
    with pytest.raises(dlfeed.DataError, match=r"\\xc6bad\.npy: at offset 0: expected the NPY magic"):
        dlfeed.Loader(os.fsdecode(d), batch_size=4)
