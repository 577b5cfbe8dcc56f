# SPDX-License-Identifier: Apache-2.0
"""Reading a Megatron-LM indexed dataset (.bin + .idx): dlfeed against the way
Megatron's own IndexedDataset reads it (numpy memmaps of both files; a
sequence is np.frombuffer(bin, dtype, count=length, offset=pointer)).

    .venv/bin/python bench/indexed_binary.py [--sequences N] [--runs R] [--quick]

Writes N sequences of uint16 tokens (lengths uniform in 64..2048) with
Megatron's layout (the _IndexWriter header, int32 lengths, int64 pointers,
document index), warms the page cache, then alternates R times: open the
index (dlfeed.Loader(...) / Megatron's _IndexReader arithmetic), and one
epoch in a global shuffle, batch 32, every sequence copied into memory the
consumer owns (dlfeed's batch; np.array(...) of each memmap slice, as a
collate does). Prints medians and the ratios. No speed is asserted anywhere.
"""
import argparse
import os
import pathlib
import statistics
import struct
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
build = pathlib.Path(os.environ.get("DLFEED_BUILD_DIR", ROOT / "build"))
sys.path[:0] = [str(ROOT / "python"), str(build / "python")]
import dlfeed  # noqa: E402


def write_megatron(prefix, n, seed=0):
    """IndexedDatasetBuilder's files for n uint16 sequences, one document each."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(64, 2049, size=n).astype(np.int32)
    with open(f"{prefix}.bin", "wb") as f:
        for n_tokens in lengths:
            f.write(rng.integers(0, 50000, size=int(n_tokens), dtype=np.uint16).tobytes())
    pointers = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * 2)[:-1]]).astype(np.int64)
    docs = np.arange(n + 1, dtype=np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", n) + struct.pack("<Q", len(docs)))
        f.write(lengths.tobytes() + pointers.tobytes() + docs.tobytes())
    return int(lengths.sum()) * 2


def megatron_open(prefix):
    """_IndexReader and IndexedDataset.initialize: header, then memmap views."""
    with open(f"{prefix}.idx", "rb") as s:
        assert s.read(9) == b"MMIDIDX\x00\x00"
        struct.unpack("<Q", s.read(8))
        struct.unpack("<B", s.read(1))
        count = struct.unpack("<Q", s.read(8))[0]
        struct.unpack("<Q", s.read(8))
        offset = s.tell()
    idx = memoryview(np.memmap(f"{prefix}.idx", mode="r", order="C"))
    lengths = np.frombuffer(idx, dtype=np.int32, count=count, offset=offset)
    pointers = np.frombuffer(idx, dtype=np.int64, count=count, offset=offset + lengths.nbytes)
    data = memoryview(np.memmap(f"{prefix}.bin", mode="r", order="C"))
    return lengths, pointers, data


def megatron_epoch(prefix, epoch, batch):
    lengths, pointers, data = megatron_open(prefix)
    order = np.random.default_rng(epoch).permutation(len(lengths))
    tokens = 0
    for start in range(0, len(order), batch):
        seqs = [np.array(np.frombuffer(data, dtype=np.uint16, count=int(lengths[k]), offset=int(pointers[k])))
                for k in order[start:start + batch]]
        tokens += sum(s.size for s in seqs)
    return tokens


def dlfeed_epoch(loader, epoch):
    tokens = 0
    for b in loader.iter_epoch(epoch):
        tokens += sum(s.size for s in b[0])
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2,000 sequences, 2 runs (a smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.sequences, args.runs = 2000, 2
    with tempfile.TemporaryDirectory() as t:
        prefix = os.path.join(t, "corpus_text_document")
        size = write_megatron(prefix, args.sequences)
        for p in (f"{prefix}.bin", f"{prefix}.idx"):  # warm: both read from the page cache
            pathlib.Path(p).read_bytes()
        times = {"dlfeed open": [], "megatron open": [], "dlfeed epoch": [], "megatron epoch": []}
        for run in range(args.runs):
            t0 = time.perf_counter()
            loader = dlfeed.Loader(f"{prefix}.bin", ragged=True, batch_size=32, strategy="global_shuffle",
                                   seed=1, resident="off")
            times["dlfeed open"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            megatron_open(prefix)
            times["megatron open"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            a = dlfeed_epoch(loader, run)
            times["dlfeed epoch"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = megatron_epoch(prefix, run, 32)
            times["megatron epoch"].append(time.perf_counter() - t0)
            assert a == b == size // 2, (a, b, size)
            loader.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{args.sequences} sequences, {size / 2**20:.1f} MiB of uint16 tokens, warm, {args.runs} runs "
              "(medians):")
        for k, v in med.items():
            print(f"  {k:15s} {v * 1e3:10.1f} ms")
        print(f"  epoch: dlfeed {args.sequences / med['dlfeed epoch']:,.0f} sequences/s, Megatron-style "
              f"{args.sequences / med['megatron epoch']:,.0f} sequences/s; ratio "
              f"{med['megatron epoch'] / med['dlfeed epoch']:.2f}x")


if __name__ == "__main__":
    main()
