# SPDX-License-Identifier: Apache-2.0
"""Datasets in S3 (a real SeaweedFS server that checks signatures, s3_harness.py): the same
files written by numpy and TensorFlow read from a folder and from s3://bucket/prefix give
the same batches in the same order; the command line reads them too; throttling, resets
and short bodies are tried again with every sample delivered once; bad input is a clear
error naming the object, within seconds."""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import dlfeed
from py_datasets import assert_same_epoch, loader_kwargs, shuffled_epoch, write_dataset, write_with_hidden

BUCKET = "datasets"

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")


def write_idx(tfrecord: pathlib.Path) -> None:
    """The DALI/DLIO sidecar (`offset length` per record), as tfrecord2idx writes it."""
    data = tfrecord.read_bytes()
    lines, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        lines.append(f"{off} {n + 16}\n")
        off += n + 16
    (tfrecord.parent / (tfrecord.name + ".idx")).write_text("".join(lines))


@pytest.fixture(scope="module")
def uploaded(s3_server, tmp_path_factory):
    """{name: (local folder, s3 url, x, y)} for npz, tfrecord (with and without .idx), npy."""
    base = tmp_path_factory.mktemp("s3data")
    out = {}
    for fmt in ("npz", "tfrecord"):
        root, x, y = write_dataset(fmt, base / fmt, files=3, per_file=40, seed=5)
        out[fmt] = (root, x, y)
    idx_root = base / "tfrecord_idx"
    shutil.copytree(base / "tfrecord", idx_root)
    for f in sorted(idx_root.glob("*.tfrecord")):
        write_idx(f)
    out["tfrecord_idx"] = (idx_root, out["tfrecord"][1], out["tfrecord"][2])
    npy = base / "npy"
    npy.mkdir()
    x = np.arange(3 * 50 * 6, dtype=np.float32).reshape(3 * 50, 6)
    for f in range(3):
        np.save(npy / f"x_{f:03d}.npy", x[f * 50:(f + 1) * 50])
    out["npy"] = (npy, x, None)
    result = {}
    for name, (root, x, y) in out.items():
        s3_server.upload_dir(root, BUCKET, f"{name}/")
        result[name] = (root, f"s3://{BUCKET}/{name}", x, y)
    return result


@pytest.mark.parametrize("name", ["npz", "tfrecord", "tfrecord_idx", "npy"])
def test_s3_reads_what_the_folder_holds(s3_server, uploaded, monkeypatch, name):
    s3_server.apply_env(monkeypatch)
    root, url, x, y = uploaded[name]
    kw = loader_kwargs(name.split("_")[0]) if y is not None else {}
    before = dlfeed._dlfeed.s3_stats()
    assert_same_epoch(shuffled_epoch(str(root), 16, 11, **kw), shuffled_epoch(url, 16, 11, **kw), x)
    after = dlfeed._dlfeed.s3_stats()
    assert after["gets"] > before["gets"] and after["lists"] > before["lists"]
    assert after["failures"] == before["failures"]


def test_cli_run_and_inspect_read_s3(dlfeed, s3_server, uploaded, tmp_path):
    root, url, x, _ = uploaded["npz"]
    env = s3_server.env()

    def run(path, summary):
        proc = subprocess.run([dlfeed.binary, "run", "--epochs", "2", "--checksum", "--batch-size", "8",
                               "--fields", "x,y", "--summary-json", str(summary), path], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        checksum = [line for line in proc.stdout.splitlines() if line.startswith("checksum:")]
        return checksum, proc.stdout, json.loads(summary.read_text())

    local, _, local_js = run(str(root), tmp_path / "local.json")
    remote, out, remote_js = run(url, tmp_path / "remote.json")
    assert remote == local and f"over {2 * len(x)} samples" in remote[0]
    assert "object store:" in out and "object_store" not in local_js
    assert remote_js["object_store"]["gets"] > 0 and remote_js["object_store"]["failures"] == 0
    proc = subprocess.run([dlfeed.binary, "inspect", "--json", url + "/part_001.npz"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_samples"] == 40
    proc = subprocess.run([dlfeed.binary, "calibrate", url], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and f"{url}: an object store has no page cache" in proc.stderr


def test_faults_are_tried_again_and_every_sample_arrives_once(s3_proxy, uploaded, monkeypatch):
    root, url, x, y = uploaded["tfrecord_idx"]
    proxy = s3_proxy(seed=3, slowdown=0.15, reset=0.05, short_body=0.05)
    proxy.apply_env(monkeypatch)
    before = dlfeed._dlfeed.s3_stats()
    ids, fields = shuffled_epoch(url, 16, 11, **loader_kwargs("tfrecord"))
    assert sorted(ids.tolist()) == list(range(len(x)))
    np.testing.assert_array_equal(np.concatenate([f[0] for f in fields]), x[ids])
    np.testing.assert_array_equal(np.concatenate([f[1] for f in fields]), y[ids])
    after = dlfeed._dlfeed.s3_stats()
    stats = proxy.stats()
    assert stats["slowdown"] > 0 and stats["reset"] + stats["short_body"] > 0
    assert after["retry_throttled"] - before["retry_throttled"] == stats["slowdown"]
    assert after["retry_network"] + after["retry_short"] - before["retry_network"] - before["retry_short"] >= \
        stats["reset"] + stats["short_body"]
    assert after["failures"] == before["failures"]


@pytest.mark.parametrize("fault", [dict(delay_ms=6000), dict(slowdown=1.0)])
def test_close_ends_the_requests_in_flight(s3_server, s3_proxy, tmp_path, monkeypatch, fault):
    """Closing a loader cancels its reads: it does not wait for a slow server's answers (6 s each) or for
    every request's 8 tries against a server answering 503 to all."""
    root = tmp_path / "p"
    root.mkdir()
    for f in range(8):
        np.save(root / f"x_{f}.npy", np.arange(400 * 1024, dtype=np.float32).reshape(400, 1024))
    s3_server.upload_dir(root, BUCKET, "closing/")
    proxy = s3_proxy()
    proxy.apply_env(monkeypatch)
    loader = dlfeed.Loader(f"s3://{BUCKET}/closing", batch_size=4, resident="off", strategy="global_shuffle",
                           seed=1)
    next(iter(loader))
    proxy.configure(**fault)
    time.sleep(0.3)  # reads ahead are waiting on the proxy now
    start = time.monotonic()
    loader.close()
    assert time.monotonic() - start < 3, f"close waited {time.monotonic() - start:.1f} s for {fault}"


def test_an_epoch_given_up_leaves_the_next_one_whole(s3_server, s3_proxy, tmp_path, monkeypatch):
    """Giving up an epoch cancels its requests in flight (a slow server does not hold the next epoch's
    start), and only theirs: the next epoch reads every sample, with no error counted for the cancelled."""
    root = tmp_path / "p"
    root.mkdir()
    for f in range(4):
        np.save(root / f"x_{f}.npy", np.arange(f * 4000, (f + 1) * 4000, dtype=np.float32).reshape(400, 10))
    s3_server.upload_dir(root, BUCKET, "giveup/")
    proxy = s3_proxy()
    proxy.apply_env(monkeypatch)
    loader = dlfeed.Loader(f"s3://{BUCKET}/giveup", batch_size=8, resident="off", strategy="global_shuffle",
                           seed=2, overlap_epochs=False)
    it = loader.iter_epoch(0)
    next(it)
    proxy.configure(delay_ms=6000)
    time.sleep(0.3)  # the reads ahead wait on the proxy
    proxy.configure(delay_ms=0)
    start = time.monotonic()
    ids, xs = [], []
    for batch in loader.iter_epoch(1):  # gives up epoch 0
        ids.extend(int(i) for i in batch.sample_ids)
        xs.append(np.array(batch[0]))
    assert time.monotonic() - start < 4, "the next epoch waited for the given-up epoch's slow requests"
    assert sorted(ids) == list(range(1600))
    got = np.concatenate(xs)[np.argsort(ids)]
    np.testing.assert_array_equal(got, np.arange(16000, dtype=np.float32).reshape(1600, 10))
    loader.close()


def test_wrong_secret_is_a_clear_error(s3_server, uploaded, monkeypatch):
    s3_server.apply_env(monkeypatch)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
    with pytest.raises(Exception) as e:
        dlfeed.Loader(uploaded["npz"][1], batch_size=8, fields=["x", "y"])
    msg = str(e.value)
    assert f"s3://{BUCKET}/npz/ (listing): HTTP 403 SignatureDoesNotMatch" in msg
    assert "wrong-secret-value" not in msg  # secrets never in messages


def test_missing_bucket_and_prefix_are_clear_errors(s3_server, uploaded, monkeypatch):
    s3_server.apply_env(monkeypatch)
    with pytest.raises(Exception) as e:
        dlfeed.Loader("s3://no-such-bucket/x", batch_size=8)
    assert "s3://no-such-bucket/" in str(e.value) and "NoSuchBucket" in str(e.value)
    with pytest.raises(Exception) as e:
        dlfeed.Loader(f"s3://{BUCKET}/no/such/prefix", batch_size=8)
    assert f"s3://{BUCKET}/no/such/prefix: no object of that name and none under" in str(e.value)


def test_unreachable_endpoint_fails_within_seconds(s3_server, uploaded, monkeypatch):
    s3_server.apply_env(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard: nothing listens
    t0 = time.monotonic()
    with pytest.raises(Exception) as e:
        dlfeed.Loader(uploaded["npz"][1], batch_size=8, fields=["x", "y"])
    assert time.monotonic() - t0 < 20
    assert "s3://" in str(e.value) and "http://127.0.0.1:9" in str(e.value)


def test_an_endpoint_that_is_no_s3_server_is_said_to_be_so(s3_server, uploaded, monkeypatch):
    """A web server at AWS_ENDPOINT_URL (a wrong port, another service) answered 404 to the listing, and the
    error read "HTTP 404" as a missing prefix would: it says the answer held no S3 error, and names the
    endpoint."""
    import http.server
    import threading

    class NotS3(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"<html><body><h1>404 Not Found</h1></body></html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        s3_server.apply_env(monkeypatch, endpoint=endpoint)
        with pytest.raises(dlfeed.Error) as e:
            dlfeed.Loader(uploaded["npz"][1], batch_size=8, fields=["x", "y"])
    finally:
        server.shutdown()
        server.server_close()
    msg = str(e.value)
    assert "HTTP 404 with no S3 error in the answer (is the endpoint an S3 server?)" in msg, msg
    assert f"at {endpoint} (AWS_ENDPOINT_URL)" in msg, msg


def test_a_server_that_stops_answering_mid_run_is_an_error_within_seconds(s3_proxy, uploaded):
    """A server that stops answering (frozen, or a proxy holding every response) between epochs: each
    request is given up after the stall timeout with nothing received and tried at most 3 times, so the
    next epoch fails in seconds naming the object, not after 8 tries of the whole request timeout."""
    proxy = s3_proxy()
    _, url, _, _ = uploaded["npz"]
    script = (
        "import sys, dlfeed\n"
        f"loader = dlfeed.Loader({url!r}, batch_size=16, fields=['x', 'y'], resident='off', overlap_epochs=False)\n"
        "print(sum(len(b) for b in loader), flush=True)\n"
        "sys.stdin.readline()\n"
        "print(sum(len(b) for b in loader), flush=True)\n")
    env = dict(proxy.env(), DLFEED_S3_STALL_TIMEOUT_MS="1000")
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "120"
        proxy.configure(delay_ms=8_000)  # every response held for 8 s, far past the stall timeout
        t0 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 20, "given up after 3 stalls of 1 s (and backoff)"
        assert proc.returncode != 0
        assert f"{url}/" in err and "after 3 tries" in err and "Operation too slow" in err, err[-2000:]
    finally:
        proxy.configure(delay_ms=0)
        if proc.poll() is None:
            proc.kill()


def test_hidden_keys_are_no_data_as_in_a_folder(s3_server, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    write_with_hidden(tmp_path)
    s3_server.upload_dir(tmp_path, BUCKET, "hidden/")
    loader = dlfeed.Loader(f"s3://{BUCKET}/hidden", batch_size=5, strategy="sequential")
    rows = np.concatenate([np.array(b[0]) for b in loader])
    assert loader.num_samples == 20 and sorted(set(rows.ravel().tolist())) == [0.0, 1.0]


def test_mixed_paths_are_refused_clearly(s3_server, uploaded, monkeypatch):
    s3_server.apply_env(monkeypatch)
    with pytest.raises(Exception) as e:
        dlfeed.Loader([str(uploaded["npz"][0]), uploaded["npz"][1]], batch_size=8, fields=["x", "y"])
    assert "files or objects, not both" in str(e.value)


def test_torch_and_tf_adaptors_take_s3_urls(s3_server, uploaded, monkeypatch):
    s3_server.apply_env(monkeypatch)
    _, url, x, y = uploaded["npz"]
    import dlfeed.tf
    import dlfeed.torch
    import torch

    ds = dlfeed.torch.Dataset(url, fields=["x", "y"], batch_size=16)
    seen = 0
    for xb, yb in torch.utils.data.DataLoader(ds, batch_size=None):
        assert isinstance(xb, torch.Tensor) and xb.shape[1:] == x.shape[1:]
        seen += len(yb)
    assert seen == len(x)
    import tensorflow as tf

    tds = dlfeed.tf.dataset(url, fields=["x", "y"], batch_size=16)
    labels = np.concatenate([e[1].numpy() if isinstance(e, tuple) else e["y"].numpy() for e in tds])
    assert isinstance(tds, tf.data.Dataset)
    assert sorted(labels.tolist()) == sorted(y.tolist())


def gets():
    return dlfeed._dlfeed.s3_stats()["gets"]


def read_epoch(loader):
    ids, xs = [], []
    for batch in loader:
        ids.append(np.array(batch.sample_ids))
        xs.append(np.array(batch[0]))
    return np.concatenate(ids), np.concatenate(xs)


def test_cache_dir_serves_later_epochs_and_runs_with_no_get(s3_server, uploaded, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    _, url, x, _ = uploaded["tfrecord_idx"]
    kw = dict(batch_size=16, strategy="global_shuffle", seed=2, cache_dir=tmp_path / "cache", resident="off",
              **loader_kwargs("tfrecord"))
    loader = dlfeed.Loader(url, **kw)
    ids, xs = read_epoch(loader)
    np.testing.assert_array_equal(xs, x[ids])
    before = gets()
    ids, xs = read_epoch(loader)  # the next epoch: every byte from the cache
    assert gets() == before
    np.testing.assert_array_equal(xs, x[ids])
    loader.close()
    # A new run (a new loader, the index read again): still no ranged GET.
    stats = dlfeed._dlfeed.s3_stats()
    loader = dlfeed.Loader(url, **kw)
    ids, xs = read_epoch(loader)
    loader.close()
    after = dlfeed._dlfeed.s3_stats()
    assert after["gets"] == stats["gets"] and after["cache_hits"] > stats["cache_hits"]
    np.testing.assert_array_equal(xs, x[ids])
    # Every piece is written whole: no temporary file left, each one its bytes and a CRC.
    pieces = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id"]
    assert pieces and not [p for p in pieces if ".tmp." in p.name]


def read_again_checked(url, kw, x):
    """One epoch of a new loader of `url` (keywords `kw`), checked against `x` by sample id; the process's
    s3 stats before and after it."""
    before = dlfeed._dlfeed.s3_stats()
    loader = dlfeed.Loader(url, **kw)
    ids, xs = read_epoch(loader)
    loader.close()
    np.testing.assert_array_equal(xs, x[ids])
    return before, dlfeed._dlfeed.s3_stats()


def test_a_damaged_piece_is_fetched_again(s3_server, uploaded, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    _, url, x, y = uploaded["npz"]
    kw = dict(batch_size=16, strategy="global_shuffle", seed=4, cache_dir=tmp_path / "cache", fields=["x", "y"])
    loader = dlfeed.Loader(url, **kw)
    read_epoch(loader)
    loader.close()
    pieces = sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id")
    data = bytearray(pieces[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    pieces[0].write_bytes(bytes(data))
    pieces[-1].write_bytes(pieces[-1].read_bytes()[:-7])  # and one cut short
    before, after = read_again_checked(url, kw, x)
    assert after["cache_damaged"] - before["cache_damaged"] >= 2 and after["gets"] > before["gets"]


def test_a_fifo_in_the_cache_folder_is_not_waited_on(s3_server, uploaded, tmp_path, monkeypatch):
    # A FIFO in place of a piece or of a version's id file: an open() that waited for a writer
    # (found by outside testing). It is a damaged piece, or an id written again.
    s3_server.apply_env(monkeypatch)
    _, url, x, _ = uploaded["npy"]
    kw = dict(batch_size=16, strategy="global_shuffle", seed=4, cache_dir=tmp_path / "cache")
    loader = dlfeed.Loader(url, **kw)
    read_epoch(loader)
    loader.close()
    piece = sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id")[0]
    piece.unlink()
    os.mkfifo(piece)
    ident = sorted((tmp_path / "cache").rglob("id"))[-1]
    ident.unlink()
    os.mkfifo(ident)
    script = ("import sys, json, numpy as np, dlfeed\n"
              "kw = json.loads(sys.argv[2])\n"
              "l = dlfeed.Loader(sys.argv[1], **kw)\n"
              "print(json.dumps([([int(i) for i in b.sample_ids], float(np.array(b[0]).sum())) for b in l]))\n")
    kw["cache_dir"] = str(kw["cache_dir"])
    proc = subprocess.run([sys.executable, "-c", script, url, json.dumps(kw)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert sorted(i for ids, _ in got for i in ids) == list(range(len(x)))
    assert all(total == float(x[ids].sum()) for ids, total in got)


def test_cache_limit_keeps_what_fits_and_a_new_version_is_read(s3_server, uploaded, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "v"
    root.mkdir()
    a = np.arange(4 * 300_000, dtype=np.float32).reshape(4, 300_000)  # 4.8 MB: five 1 MiB pieces
    np.save(root / "a.npy", a)
    s3_server.upload_dir(root, BUCKET, "versioned/")
    url = f"s3://{BUCKET}/versioned"
    kw = dict(batch_size=2, cache_dir=tmp_path / "cache", cache_limit=2 << 20)
    loader = dlfeed.Loader(url, **kw)
    _, xs = read_epoch(loader)
    loader.close()
    np.testing.assert_array_equal(np.sort(xs, axis=0), a)
    kept = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id")
    assert 0 < kept <= 2 << 20
    # The object rewritten (same size, a new ETag): its new bytes, never the kept ones.
    np.save(root / "a.npy", -a)
    s3_server.upload_dir(root, BUCKET, "versioned/")
    loader = dlfeed.Loader(url, **kw)
    _, xs = read_epoch(loader)
    loader.close()
    np.testing.assert_array_equal(np.sort(xs, axis=0), np.sort(-a, axis=0))


def test_folders_of_an_earlier_cache_format_do_not_count_against_the_bound(s3_server, uploaded, tmp_path,
                                                                           monkeypatch):
    # An earlier release's folder (its id without the format line; its pieces are never read) holding
    # more than the bound: the cache still keeps what this loader fetches.
    s3_server.apply_env(monkeypatch)
    old = tmp_path / "cache" / "0123456789abcdef-0123456789abcdef"
    old.mkdir(parents=True)
    (old / "id").write_text(f"s3://{BUCKET}/npy/x_000.npy\n\"etag\"\n1200\n")
    (old / "0").write_bytes(b"\0" * (3 << 20))
    _, url, x, _ = uploaded["npy"]
    loader = dlfeed.Loader(url, batch_size=10, resident="off", cache_dir=tmp_path / "cache", cache_limit=2 << 20)
    ids, xs = read_epoch(loader)
    loader.close()
    np.testing.assert_array_equal(xs, x[ids])
    kept = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != "id" and old not in p.parents]
    assert len(kept) == 3  # one piece of each object


def test_a_later_loader_with_another_cache_limit_keeps_to_its_own(s3_server, tmp_path, monkeypatch):
    """The bound is the loader's: a second loader of the process over the same folder with a larger
    cache_limit keeps what the first could not (it kept to the first's bound before)."""
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "v"
    root.mkdir()
    np.save(root / "a.npy", np.arange(4 * 300_000, dtype=np.float32).reshape(4, 300_000))  # 4.6 MB
    s3_server.upload_dir(root, BUCKET, "limits/")
    cache = tmp_path / "cache"

    def kept():
        return sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and p.name != "id")

    for limit in (2 << 20, 64 << 20):
        loader = dlfeed.Loader(f"s3://{BUCKET}/limits", batch_size=2, cache_dir=cache, cache_limit=limit,
                               resident="off")
        read_epoch(loader)
        loader.close()
        assert kept() <= limit
        if limit == 2 << 20:
            small = kept()
    assert kept() >= 4 * 300_000 * 4 > small  # the whole object now


def put_version(s3_server, root, prefix, dtype):
    """a.npy, 64 values of `dtype` as (16, 4), uploaded under PREFIX/: int32 and float32 versions are the
    same size with another ETag (a rewrite the size cannot tell)."""
    np.save(root / "a.npy", np.arange(64, dtype=dtype).reshape(16, 4))
    s3_server.upload_dir(root, BUCKET, f"{prefix}/")


def test_an_object_rewritten_under_a_loader_is_an_error(s3_server, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "r"
    root.mkdir()
    put_version(s3_server, root, "rewritten", np.int32)
    loader = dlfeed.Loader(f"s3://{BUCKET}/rewritten", batch_size=4, overlap_epochs=False, resident="off")
    read_epoch(loader)
    put_version(s3_server, root, "rewritten", np.float32)  # rewritten in place after it was read
    with pytest.raises(Exception) as e:
        read_epoch(loader)
    assert f"s3://{BUCKET}/rewritten/a.npy" in str(e.value) and "changed since it was listed" in str(e.value)
    loader.close()


def test_a_later_listing_in_the_process_never_moves_a_loader_to_the_new_version(s3_server, tmp_path, monkeypatch):
    """A loader reads the version it indexed or fails: a second loader listing the prefix after a rewrite
    (the process's store then knows the new ETag) must not make the first ask for the new bytes and read
    them with its old index (float32 bits as int32)."""
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "r"
    root.mkdir()
    put_version(s3_server, root, "relisted", np.int32)
    first = dlfeed.Loader(f"s3://{BUCKET}/relisted", batch_size=4, overlap_epochs=False, resident="off")
    _, xs = read_epoch(first)
    np.testing.assert_array_equal(np.sort(xs, axis=None), np.arange(64, dtype=np.int32))
    put_version(s3_server, root, "relisted", np.float32)
    second = dlfeed.Loader(f"s3://{BUCKET}/relisted", batch_size=4, overlap_epochs=False, resident="off")
    _, new = read_epoch(second)  # the new loader reads the new version
    np.testing.assert_array_equal(np.sort(new, axis=None), np.arange(64, dtype=np.float32))
    with pytest.raises(Exception) as e:  # the first: an error naming the object, never the new bytes
        read_epoch(first)
    assert f"s3://{BUCKET}/relisted/a.npy" in str(e.value) and "changed since it was" in str(e.value)
    first.close()
    second.close()


@pytest.mark.parametrize("cached", [False, True])
def test_a_new_loader_of_one_object_reads_its_new_version(s3_server, tmp_path, monkeypatch, cached):
    """A URL naming one object is listed by a HEAD: a loader made after a rewrite asks the server again, as
    a prefix's listing does, and reads the new version (not the old one's cached pieces, nor an If-Match
    error with the ETag the process first learnt)."""
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "r"
    root.mkdir()
    url = f"s3://{BUCKET}/one{int(cached)}/a.npy"
    kw = dict(batch_size=4, overlap_epochs=False, resident="off")
    if cached:
        kw["cache_dir"] = tmp_path / "cache"
    put_version(s3_server, root, f"one{int(cached)}", np.int32)
    first = dlfeed.Loader(url, **kw)
    _, xs = read_epoch(first)
    np.testing.assert_array_equal(np.sort(xs, axis=None), np.arange(64, dtype=np.int32))
    first.close()
    put_version(s3_server, root, f"one{int(cached)}", np.float32)
    second = dlfeed.Loader(url, **kw)
    _, new = read_epoch(second)
    assert new.dtype == np.float32
    np.testing.assert_array_equal(np.sort(new, axis=None), np.arange(64, dtype=np.float32))
    second.close()


def test_a_piece_copied_to_another_place_is_damaged_not_read(s3_server, uploaded, tmp_path, monkeypatch):
    s3_server.apply_env(monkeypatch)
    _, url, x, _ = uploaded["npy"]
    kw = dict(batch_size=10, strategy="sequential", resident="off", cache_dir=tmp_path / "cache")
    loader = dlfeed.Loader(url, **kw)
    read_epoch(loader)
    loader.close()
    folders = sorted(p for p in (tmp_path / "cache").iterdir() if p.is_dir())
    assert len(folders) == 3 and all((f / "0").is_file() for f in folders)
    # Piece 0 of one object over piece 0 of another: the same length, a valid piece of its own place.
    shutil.copyfile(folders[1] / "0", folders[0] / "0")
    before, after = read_again_checked(url, kw, x)
    assert after["cache_damaged"] - before["cache_damaged"] == 1 and after["gets"] > before["gets"]


def test_a_dataset_that_fits_is_held_each_object_read_whole_once(s3_server, uploaded, monkeypatch):
    """By default (resident="auto") a dataset within half the memory budget is held, as files are:
    each object is one GET, from create on, and the epochs send no other."""
    s3_server.apply_env(monkeypatch)
    root, url, x, y = uploaded["npz"]
    objects = len(list(root.glob("*.npz")))
    before = gets()
    loader = dlfeed.Loader(url, batch_size=16, strategy="global_shuffle", seed=6, fields=["x", "y"])
    assert loader.stats()["resident_reason"].startswith(f"held in memory: {objects} objects")
    ids, xs = read_epoch(loader)  # it waits for the objects it needs
    np.testing.assert_array_equal(xs, x[ids])
    made = gets()
    assert "so far" not in loader.stats()["resident_reason"]  # all held by the epoch's end
    ids, xs = read_epoch(loader)
    np.testing.assert_array_equal(xs, x[ids])
    assert gets() == made
    loader.close()
    # Beside the indexing's GETs (what a loader reading per batch sends at create), one whole
    # GET per object; reading per batch sends GETs every epoch.
    start = gets()
    off = dlfeed.Loader(url, batch_size=16, strategy="global_shuffle", seed=6, fields=["x", "y"], resident="off")
    indexing = gets() - start
    start = gets()
    read_epoch(off)
    off.close()
    assert made - before == indexing + objects and gets() > start
    with pytest.raises(dlfeed.Error) as e:
        dlfeed.Loader(url, batch_size=16, fields=["x", "y"], resident="on", memory_budget=1 << 10)
    assert "resident=on" in str(e.value)
    # A rank of a job reads its shard: holding would fetch every object on every rank.
    shard = dlfeed.Loader(url, batch_size=16, fields=["x", "y"], rank=1, world_size=2)
    assert "each of the job's 2 ranks would fetch every object" in shard.stats()["resident_reason"]
    shard.close()


def test_index_cache_serves_objects_by_size_and_etag(s3_server, tmp_path, monkeypatch):
    """index_cache="auto" over s3:// keeps the index under $XDG_CACHE_HOME: a second loader
    sends no GET to index (TFRecord without .idx is otherwise a scan of every object), and an
    object rewritten since (a new ETag) is indexed again, never taken from the cache."""
    s3_server.apply_env(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root, x, y = write_dataset("tfrecord", tmp_path / "tfr", files=3, per_file=20, seed=9)
    s3_server.upload_dir(root, BUCKET, "indexed/")
    url = f"s3://{BUCKET}/indexed"
    kw = dict(batch_size=8, strategy="global_shuffle", seed=1, index_cache="auto", resident="off",
              **loader_kwargs("tfrecord"))

    def made():
        start = gets()
        loader = dlfeed.Loader(url, **kw)
        return loader, gets() - start

    first, first_gets = made()
    ids, xs = read_epoch(first)
    first.close()
    np.testing.assert_array_equal(xs, x[ids])
    assert first_gets > 0 and list((tmp_path / "xdg" / "dlfeed").glob("dlfeed-index-*"))
    again, again_gets = made()
    ids, xs = read_epoch(again)
    again.close()
    assert again_gets == 0
    np.testing.assert_array_equal(xs, x[ids])
    # One object rewritten with other values, same layout and size: a new ETag.
    name = sorted(root.glob("*.tfrecord"))[1].name
    root2, x2, y2 = write_dataset("tfrecord", tmp_path / "tfr2", files=3, per_file=20, seed=10)
    size = (root / name).stat().st_size
    (root / name).write_bytes((root2 / name).read_bytes())
    assert (root / name).stat().st_size == size  # only the ETag tells the versions apart
    s3_server.upload_dir(root, BUCKET, "indexed/")
    x[20:40] = x2[20:40]
    third, third_gets = made()
    ids, xs = read_epoch(third)
    third.close()
    assert 0 < third_gets < first_gets
    np.testing.assert_array_equal(xs, x[ids])


def test_max_requests_per_second_spaces_the_requests(s3_server, uploaded, tmp_path):
    """DLFEED_S3_MAX_REQUESTS_PER_SECOND bounds the process's requests: n requests at 20 a
    second take at least (n - 1) / 20 s (a lower bound, whatever the machine's speed); a value
    that is not a rate is a clear error."""
    _, url, _, _ = uploaded["npz"]
    script = (
        "import time, dlfeed\n"
        "t0 = time.monotonic(); s0 = dlfeed._dlfeed.s3_stats()['requests']\n"
        f"loader = dlfeed.Loader({url!r}, batch_size=16, fields=['x', 'y'], resident='off')\n"
        "n = sum(len(b) for b in loader)\n"
        "print(n, dlfeed._dlfeed.s3_stats()['requests'] - s0, time.monotonic() - t0)\n")
    env = dict(s3_server.env(), DLFEED_S3_MAX_REQUESTS_PER_SECOND="20")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    samples, requests, seconds = proc.stdout.split()
    assert int(samples) == 120 and int(requests) >= 10
    assert float(seconds) >= (int(requests) - 1) / 20
    env["DLFEED_S3_MAX_REQUESTS_PER_SECOND"] = "fast"
    proc = subprocess.run([sys.executable, "-c", "import dlfeed"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode != 0 and "DLFEED_S3_MAX_REQUESTS_PER_SECOND is a number" in proc.stderr


def test_keys_with_control_characters_are_listed_as_stored(s3_server, tmp_path, monkeypatch):
    # A tab or \x01 in a key cannot travel in XML as itself: asked without encoding-type=url the
    # listing named another key (&#x9; undecoded, \x01 as U+FFFD) and its GET was a 404.
    s3_server.apply_env(monkeypatch)
    client = s3_server.client()
    s3_server.ensure_bucket(BUCKET, client)
    keys = ["ctl/tab\tx.npy", "ctl/one\x01y.npy", "ctl/plus+ %z.npy"]
    for i, key in enumerate(keys):
        body = tmp_path / f"{i}.npy"
        np.save(body, np.full((2, 3), i, np.int32))
        client.upload_file(str(body), BUCKET, key)
    loader = dlfeed.Loader(f"s3://{BUCKET}/ctl", batch_size=8, strategy="sequential")
    got = np.concatenate([np.array(b[0]) for b in loader])
    assert sorted(got[::2, 0].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("misbehaviour", ["a key twice", "no end"])
def test_a_listing_that_repeats_a_key_or_never_ends_is_an_error(s3_server, s3_proxy, monkeypatch, misbehaviour):
    # Behind a proxy answering the listings as a misbehaving server would: a key on two pages was read
    # as two files (its samples twice), and empty pages that say "more" were listed for ever.
    pages = []

    def listing(target):
        pages.append(target)
        n = len(pages)
        if misbehaviour == "a key twice":
            more = n == 1
            contents = "<Contents><Key>dup/a.npy</Key><Size>136</Size><ETag>\"e\"</ETag></Contents>"
        else:
            more, contents = True, ""
        token = f"<NextContinuationToken>t{n}</NextContinuationToken>" if more else ""
        return (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>{BUCKET}</Name>"
                f"<Prefix>dup/</Prefix><KeyCount>{1 if contents else 0}</KeyCount>"
                f"<IsTruncated>{'true' if more else 'false'}"
                f"</IsTruncated>{token}{contents}</ListBucketResult>").encode()

    proxy = s3_proxy(listing_body=listing)
    proxy.apply_env(monkeypatch)
    want = "gives s3://[^ ]*dup/a.npy twice" if misbehaviour == "a key twice" else \
        "1000 listing pages in a row give no key and say IsTruncated"
    start = time.monotonic()
    with pytest.raises(dlfeed.DataError, match=want):
        dlfeed.Loader(f"s3://{BUCKET}/dup/", batch_size=4)
    assert time.monotonic() - start < 30


def test_bad_settings_say_what_is_wrong(s3_server, uploaded, tmp_path, monkeypatch):
    # A bad DLFEED_S3_* value read at import was reported as "compiled module _dlfeed was not found";
    # DLFEED_S3_CONNECTIONS=abc was taken as the default; a cache folder that is a dangling link said
    # "File exists".
    env = dict(s3_server.env(), DLFEED_S3_MAX_REQUESTS_PER_SECOND="-1")
    proc = subprocess.run([sys.executable, "-c", "import dlfeed"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert "DLFEED_S3_MAX_REQUESTS_PER_SECOND is a number of requests a second" in proc.stderr
    assert "was not found" not in proc.stderr
    s3_server.apply_env(monkeypatch)
    url = uploaded["npy"][1]
    for bad in ("abc", "0", "1000"):
        monkeypatch.setenv("DLFEED_S3_CONNECTIONS", bad)
        with pytest.raises(dlfeed.InvalidArgumentError, match=f"DLFEED_S3_CONNECTIONS is .* 1 to 256, not '{bad}'"):
            dlfeed.Loader(url, batch_size=8)
    monkeypatch.delenv("DLFEED_S3_CONNECTIONS")
    (tmp_path / "cache").symlink_to(tmp_path / "missing" / "dir")
    with pytest.raises(dlfeed.Error, match=r"cache: a symbolic link to .*missing/dir, which does not exist"):
        dlfeed.Loader(url, batch_size=8, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("resident", ["off", "auto"])
def test_deflated_npz_objects_are_unpacked_as_files_are(s3_server, tmp_path, monkeypatch, resident):
    """np.savez_compressed objects: each member is read whole once an epoch and inflated, its samples
    gathered from memory (held: a view of the held object; not held: one ranged GET of the member), as
    for files. unpack="on" refused them ("io_factory makes the backend")."""
    s3_server.apply_env(monkeypatch)
    root = tmp_path / "deflated"
    root.mkdir()
    x = np.arange(4 * 30 * 12, dtype=np.float32).reshape(4 * 30, 12) * 0.5
    for f in range(4):
        np.savez_compressed(root / f"part_{f}.npz", x=x[f * 30:(f + 1) * 30])
    s3_server.upload_dir(root, BUCKET, f"deflated-{resident}/")
    loader = dlfeed.Loader(f"s3://{BUCKET}/deflated-{resident}", batch_size=7, strategy="global_shuffle", seed=2,
                           fields=["x"], unpack="on", resident=resident)
    s = loader.stats()
    assert "unpacked: 4 " in s["unpacked_reason"], s["unpacked_reason"]
    assert s["resident_reason"].startswith("held in memory" if resident == "auto" else "not held"), s
    for _ in range(2):
        seen = []
        for b in loader:
            np.testing.assert_array_equal(np.asarray(b["x"]), x[b.sample_ids])
            seen.extend(b.sample_ids.tolist())
        assert sorted(seen) == list(range(len(x)))
    loader.close()
