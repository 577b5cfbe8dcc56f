#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/object_store.py's sets' shapes, the CPU counts each reader reports
(its own and bench/_s3_peers.py's), its model of an LRU cache over the same
order (against dlfeed's node-local cache), and its table and README.md."""
from __future__ import annotations

import pathlib
import shlex
import shutil
import statistics
import tempfile
from typing import Dict, List

import _benchlib as bl
import numpy as np

PER_FILE = 64  # small: samples per NPZ file
SMALL_SHAPE = (224, 224, 3)
LARGE_SHAPE = (1, 2048, 2048)  # float32: 16 MiB
PIECES = "curl 2MiB pieces"
PEERS = ("mosaic", "litdata")  # bench/_s3_peers.py's readers


def epoch_rusage(ru0, ru1) -> dict:
    """The measured span's CPU seconds and minor page faults, in the process itself (all its threads)."""
    return {"epoch_cpu_s": ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime,
            "epoch_minflt": ru1.ru_minflt - ru0.ru_minflt}



# ---------------------------------------------------------------- the LRU model

PIECE_CACHE = 1 << 20  # the node-local cache's piece (src/s3/cache.h)


def piece_sequence(sets: Dict[str, dict], data: pathlib.Path, order: List[int]) -> List[tuple]:
    """The small set's 1 MiB pieces (file, piece) each sample of `order` touches, in order: x's
    rows and y's value (as the cache keeps them: whole pieces around the bytes asked)."""
    s = sets["small"]
    x_at, y_at = {}, {}
    for name, at, n in s["gets"]:
        if n == 8 * PER_FILE:
            y_at[name] = at
        elif name not in x_at:
            x_at[name] = at
    row = int(np.prod(SMALL_SHAPE))
    out = []
    for sid in order:
        name = s["files"][sid // PER_FILE]
        r = sid % PER_FILE
        for at, n in ((x_at[name] + r * row, row), (y_at[name] + r * 8, 8)):
            out += [(name, p) for p in range(at // PIECE_CACHE, (at + n - 1) // PIECE_CACHE + 1)]
    return out


def lru_epoch2_bytes(seq1: List, seq2: List, capacity: int, size_of) -> int:
    """Bytes an LRU cache of `capacity` bytes fetches in epoch 2, after epoch 1 filled it: each
    item of the sequences (a sample, or a piece) costs size_of(item) when it is not held."""
    from collections import OrderedDict

    cache: "OrderedDict[object, int]" = OrderedDict()
    held = fetched = 0
    for epoch, seq in ((1, seq1), (2, seq2)):
        for item in seq:
            if item in cache:
                cache.move_to_end(item)
                continue
            n = size_of(item)
            if epoch == 2:
                fetched += n
            cache[item] = n
            held += n
            while held > capacity:
                held -= cache.popitem(last=False)[1]
    return fetched


def cache_runs(a, sets, data: pathlib.Path, run_one_cached) -> List[dict]:
    """dlfeed with a node-local cache of --cache-share of the small set's bytes, two epochs
    (ranged reads): the bytes it fetched in epoch 2, measured, against an LRU cache of the same
    size modelled over the same order of pieces."""
    sizes = {f: (data / "small" / f).stat().st_size for f in sets["small"]["files"]}
    total = sum(sizes.values())
    limit = int(total * a.cache_share)
    sample = int(np.prod(SMALL_SHAPE)) + 8  # x's row and y's value
    out = []
    for rep in range(a.repeats):
        d = tempfile.mkdtemp(prefix="cache-", dir=data)
        try:
            r = run_one_cached(rep, d, limit)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        e1, e2 = r["per_epoch"]
        seq1, seq2 = piece_sequence(sets, data, e1["order"]), piece_sequence(sets, data, e2["order"])
        out.append({"repeat": rep, "set_bytes": total, "cache_limit": limit, "dlfeed_epoch1_bytes": e1["s3"]["bytes"],
                    "dlfeed_epoch2_bytes": e2["s3"]["bytes"], "dlfeed_epoch2_gets": e2["s3"]["gets"],
                    "dlfeed_epoch2_cache_hits": e2["s3"]["cache_hits"],
                    # LRU of samples (exact bytes: the kindest model) and of whole 1 MiB pieces (as a
                    # cache of pieces, like dlfeed's, would keep them)
                    "lru_epoch2_bytes": lru_epoch2_bytes(e1["order"], e2["order"], limit, lambda _: sample),
                    "lru_pieces_epoch2_bytes": lru_epoch2_bytes(
                        seq1, seq2, limit, lambda it: min(PIECE_CACHE, sizes[it[0]] - it[1] * PIECE_CACHE))})
    return out


# ---------------------------------------------------------------- the table

def summarize(results: dict, names: List[str]) -> dict:
    rows, lines = [], []
    lines.append("| set | system | MB/s median | min-max | / limit | runs | GETs | retries | open s | client CPU s "
                 "| server CPU s | note |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def used(rs: List[dict]) -> List[dict]:
        """The runs that did not fail and no build ran beside, when there are two or more; else those that
        did not fail."""
        done = [r for r in rs if "failed" not in r] or rs
        clean = [r for r in done if not r.get("disturbed")]
        return clean if len(clean) >= 2 else done

    for name in names:
        runs = [r for r in results["runs"] if r["set"] == name]
        systems = list(dict.fromkeys(r["system"] for r in runs))
        med = {s: bl.median([r["mb_s"] for r in used([r for r in runs if r["system"] == s])]) for s in systems}
        limits = {s: med[s] for s in ("boto3", "curl", PIECES) if s in med}
        limit_by = max(limits, key=limits.get) if limits else None
        limit = limits[limit_by] if limit_by else float("nan")
        for s in systems:
            every = [r for r in runs if r["system"] == s]
            rs = used(every)
            vals = [r["mb_s"] for r in rs]
            gets = bl.median([r["s3"]["gets"] for r in rs]) if "s3" in rs[0] else \
                bl.median([r["requests"] for r in rs]) if "requests" in rs[0] else float("nan")
            retries = sum(r["s3"]["retries"] for r in every) if "s3" in rs[0] else None
            open_s = bl.median([r["open_s"] for r in rs]) if "open_s" in rs[0] else float("nan")
            # The span measured, in the client's own process; s3tc's DataLoader workers are other
            # processes: their whole lives, start-up included (marked *).
            whole = s.split()[0] in ("s3tc", *PEERS) and not s.endswith("w0")
            cpu = bl.median([r["client_cpu_s"] if whole or "epoch_cpu_s" not in r else r["epoch_cpu_s"] for r in rs])
            srv = bl.median([r["server_cpu_s"] for r in rs])
            note = []
            if s == limit_by:
                note.append("the limit")
            if "proxy" in rs[0]:
                note.append(f"503s sent {sum(r['proxy']['slowdown'] for r in every)}, "
                            f"every sample once {all(r['complete'] for r in every)}, "
                            f"checksums match {all(r['digest_ok'] for r in every)}")
            if s.startswith("s3tc") or s == "curl objects":
                note.append("whole objects")
            if s.split()[0] in PEERS:
                note.append("whole 64 MB shards of its own format, to a local cache")
            if any("failed" in r for r in every):
                note.append(f"{sum('failed' in r for r in every)} run(s) failed (object_store.json)")
            if "s3" in rs[0] and any(r["s3"]["failures"] for r in every):
                note.append(f"failures {sum(r['s3']['failures'] for r in every)}")
            row = {"set": name, "system": s, "mb_s": med[s], "min": min(vals), "max": max(vals),
                   "ratio": med[s] / limit, "gets": gets, "retries": retries, "open_s": open_s, "n": len(vals),
                   "runs": len(every), "client_cpu_s": cpu, "server_cpu_s": srv}
            rows.append(row)
            lines.append(f"| {name} | {s} | {bl.fmt_num(med[s])} | {bl.fmt_num(min(vals))}-{bl.fmt_num(max(vals))} "
                         f"| {row['ratio']:.2f} | {len(vals)}/{len(every)} | {bl.fmt_num(gets)} "
                         f"| {'' if retries is None else retries} "
                         f"| {'' if open_s != open_s else f'{open_s:.2f}'} "
                         f"| {cpu:.2f}{'*' if whole else ''} | {srv:.2f} "
                         f"| {'; '.join(note)} |")
    return {"rows": rows, "text": "\n".join(lines)}


def readme(results: dict, table: str) -> str:
    a = results["args"]
    sets = results["sets"]
    desc = []
    if "small" in sets:
        s = sets["small"]
        desc.append(f"small: {s['files']} NPZ files x {PER_FILE} samples, x {SMALL_SHAPE} uint8 (147 KiB) + y int64, "
                    f"{s['sample_bytes'] / 1e6:.0f} MB, batch {s['batch']}")
    if "large" in sets:
        s = sets["large"]
        desc.append(f"large: {s['files']} NPY files of one {LARGE_SHAPE} float32 sample (16 MiB), "
                    f"{s['sample_bytes'] / 1e6:.0f} MB, batch {s['batch']}")
    s3tc = results.get("s3torchconnector", "measured (s3tc w0: DataLoader without workers; "
                                           f"w{a['s3tc_workers']}: {a['s3tc_workers']} workers)")
    peers = results.get("peers", "the same samples written by each in its own format (MDS shards; optimized "
                                 "chunks; 64 MB, their default), read by its StreamingDataset into a fresh local "
                                 f"cache, shuffled, in a DataLoader (wN: N workers), one epoch per process "
                                 f"({a.get('peer_python')})")
    return f"""# s3:// datasets against the server's own limit ({results['machine']['date']})

{bl.machine_line(results['machine'])}. dlfeed: {results['build']}.
SeaweedFS 4.48 (`weed mini`, tests/python/s3_harness.py's S3Server) on 127.0.0.1, on the same machine
as the clients (they share its cores); started in {results['startup_s']:.1f} s, the sets uploaded in
{results.get('upload_s', float('nan')):.0f} s.

    {shlex.join(['.venv/bin/python', 'bench/object_store.py', *results['command'][1:]])}

Sets: {'; '.join(desc)}. {a.get('epochs', 1)} epoch(s) per dlfeed and s3torchconnector process (the
plain clients: one; the fault runs: one), global shuffle, {a['repeats']} repeats in rotating order;
MB/s = 10^6 bytes of samples delivered per second (dlfeed: from creating the loader to the epoch's end).
boto3 and curl (bench/s3_ranged_get.c, libcurl multi) do {a['threads']} ranged GETs at a time of exactly
the sample extents (small: x per sample, y one GET a file); "curl 2MiB pieces": the same bytes in the 2 MiB
GETs dlfeed::s3 splits a large sample into; the fastest of these is the limit. "curl objects": the same
program getting each object whole (what s3torchconnector reads; not the limit: other requests). "dlfeed":
the defaults (a set within half the memory budget is held: each object read whole once, at create);
"dlfeed ranged": `resident="off"`, ranged GETs of each batch's extents; "dlfeed cN": the same with
DLFEED_S3_CONNECTIONS=N (connections per loader engine; unset: 16). "proxy": dlfeed through the
harness's Python S3Proxy (one relay thread per connection), without faults and with {a['slowdown']:g} of
the GETs answered 503 SlowDown; ids and per-sample CRC32s checked against the files written.
runs: the runs the median is over / all runs (a run beside which a build of someone else's ran, seen
by sampling the processes every 0.25 s, is left out when two or more others are left; before each run the
script waits, {results.get('waited_for_builds_s', 0):.0f} s in all this time, for such builds to end).
GETs: dlfeed's s3 counters (every ranged GET, the headers read while indexing too), the plain clients'
requests. retries: summed over the repeats. CPU s: user + system seconds over the span measured, of the
client's process (*: s3tc's DataLoader workers, whole processes with their start-up) and of the server
(medians; 2 cores give 2 CPU seconds a second). s3torchconnector: {s3tc}.
Mosaic Streaming (mosaicml-streaming) and LitData: {peers}.

{table}
{cache_text(results)}
`object_store.json` holds every run (dlfeed's s3 counters, the proxy's counts, timings).
"""


def cache_text(results: dict) -> str:
    runs = results.get("cache")
    if not runs:
        return ""
    share = results["args"]["cache_share"]
    med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
    total = runs[0]["set_bytes"]
    d2, lru, lru_p = med("dlfeed_epoch2_bytes"), med("lru_epoch2_bytes"), med("lru_pieces_epoch2_bytes")
    return f"""
A node-local cache of {share:.0%} of the small set's {total / 1e6:.1f} MB (`cache_dir=`, `cache_limit=`
{runs[0]['cache_limit']}), two epochs with `resident="off"` in one process, {len(runs)} repeats: bytes fetched
from the server in the second epoch, dlfeed measured (its s3 counters) against an LRU cache of the same bytes
modelled over the same order, keeping samples (their exact bytes) or whole 1 MiB pieces (medians):

| | epoch 2 bytes fetched | share of the set |
|---|---|---|
| dlfeed (keeps what it holds once full) | {d2 / 1e6:.1f} MB | {d2 / total:.2f} |
| LRU of samples, same bytes (model) | {lru / 1e6:.1f} MB | {lru / total:.2f} |
| LRU of 1 MiB pieces, same bytes (model) | {lru_p / 1e6:.1f} MB | {lru_p / total:.2f} |
"""
