# SPDX-License-Identifier: Apache-2.0
"""Seed corpora for the fuzz targets, written by the real writers.

    .venv/bin/python tests/fuzz/make_seeds.py OUT_DIR [--dlfeed build/tools/dlfeed]

writes OUT_DIR/<target>/<seed> for every target of tests/fuzz: .npy files by
numpy (every header version, byte order, Fortran order, odd shapes), .npz
archives by numpy's savez/savez_compressed and by Python's zipfile with Zip64
end records, TFRecords and tf.train.Examples by TensorFlow, .idx sidecars as
DALI's tfrecord2idx writes them, plus dlfeed's own generator when --dlfeed is
given, and DEFLATE/zlib streams by Python's zlib. The HDF5 target writes its base files itself (see hdf5_fuzz.cc). Seeds are small (the fuzzer
mutates them); nothing here is committed.
"""
import argparse
import io
import os
import pathlib
import struct
import subprocess
import tempfile
import zipfile

import numpy as np


def save(out: pathlib.Path, target: str, name: str, data: bytes) -> None:
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def npy_bytes(arr, version=None) -> bytes:
    buf = io.BytesIO()
    if version is None:
        np.save(buf, arr)
    else:
        np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def npy_seeds(out):
    rng = np.random.default_rng(0)
    arrays = {
        "u8_4x3": rng.integers(0, 255, (4, 3), dtype=np.uint8),
        "f4_fortran": np.asfortranarray(rng.random((3, 5), dtype=np.float32)),
        "i4_big_endian": rng.integers(-9, 9, (2, 2, 2)).astype(">i4"),
        "bool": rng.random(6) < 0.5,
        "c8": (rng.random(3) + 1j * rng.random(3)).astype(np.complex64),
        "f2_last_axis": rng.random((2, 3, 4)).astype(np.float16),
        "scalar": np.array(7, dtype=np.int64),
        "empty": np.zeros((0, 5), dtype=np.float64),
        "zero_width": np.zeros((5, 0), dtype=np.uint16),
    }
    for name, arr in arrays.items():
        save(out, "npy", f"{name}.npy", npy_bytes(arr))
    save(out, "npy", "v2.npy", npy_bytes(arrays["u8_4x3"], (2, 0)))
    save(out, "npy", "v3.npy", npy_bytes(arrays["f4_fortran"], (3, 0)))


def zip64_end(path, members):
    """An archive with Zip64 end records, as zipfile writes past 65535 entries."""
    limit = zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP_FILECOUNT_LIMIT = 1  # force the Zip64 end record and locator for a small archive
    try:
        with zipfile.ZipFile(path, "w", allowZip64=True) as z:
            for name, data in members.items():
                with z.open(name, "w", force_zip64=True) as f:
                    f.write(data)
    finally:
        zipfile.ZIP_FILECOUNT_LIMIT = limit


def npz_seeds(out, tmp):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 255, (4, 2, 3), dtype=np.uint8)
    y = np.arange(4, dtype=np.int64)
    for name, fn in (("savez", np.savez), ("savez_compressed", np.savez_compressed)):
        p = tmp / f"{name}.npz"
        fn(p, x=x, y=y)
        save(out, "npz", f"{name}.npz", p.read_bytes())
    p = tmp / "single.npz"
    np.savez(p, rng.random((3, 2)).astype(np.float32))  # one member, arr_0
    save(out, "npz", "single_member.npz", p.read_bytes())
    p = tmp / "dlio_last_axis.npz"
    np.savez(p, x=rng.integers(0, 9, (3, 3, 4), dtype=np.uint8), y=np.zeros(4, dtype=np.int64))
    save(out, "npz", "dlio_last_axis.npz", p.read_bytes())
    p = tmp / "zip64_end.npz"
    zip64_end(p, {"x.npy": npy_bytes(x), "y.npy": npy_bytes(y)})
    save(out, "npz", "zip64_end.npz", p.read_bytes())
    # Deflated by zipfile directly (other deflate settings than numpy's).
    p = tmp / "deflated9.npz"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("x.npy", npy_bytes(x))
    save(out, "npz", "deflated9.npz", p.read_bytes())


def tf_seeds(out, tmp):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    def example(**features):
        feats = {}
        for k, v in features.items():
            if isinstance(v, bytes):
                feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
            elif isinstance(v, list) and v and isinstance(v[0], float):
                feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v))
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
            else:
                feats[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=v))
        return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()

    rng = np.random.default_rng(2)
    examples = [
        example(image=rng.integers(0, 255, 24, dtype=np.uint8).tobytes(), label=[3]),
        example(image=rng.random(6).astype(np.float32).tobytes(), label=[-1], x=[0.5, 1.5, 2.5]),
        example(image=[b"a", b"bc", b""], label=[1, 2, 3, 1 << 40]),
        example(x=[1.0] * 6, y=[7] * 6),
        example(),
    ]
    for i, e in enumerate(examples):
        save(out, "example", f"tf_example_{i}.pb", e)

    def tfrecord(records):
        p = tmp / "r.tfrecord"
        with tf.io.TFRecordWriter(str(p)) as w:
            for r in records:
                w.write(r)
        return p.read_bytes()

    files = {
        "images": tfrecord([example(image=rng.integers(0, 255, 24, dtype=np.uint8).tobytes(), label=[k])
                            for k in range(4)]),
        "floats": tfrecord([example(image=rng.random(6).astype(np.float32).tobytes(), label=[k], x=[0.25] * 6)
                            for k in range(3)]),
        "mixed": tfrecord(examples),
        "one": tfrecord(examples[:1]),
        "empty": b"",
    }
    for name, data in files.items():
        for flags in (0, 1, 1 | 8, 16):  # CRC off/on, f32 dtype, fixed shape (see tfrecord_fuzz.cc)
            save(out, "tfrecord", f"{name}_{flags}.tfrecord", bytes([flags]) + data)
        # The sidecar, as DALI's tfrecord2idx writes it: "offset length" per record.
        lines, off = [], 0
        while off < len(data):
            (n,) = struct.unpack_from("<Q", data, off)
            lines.append(f"{off} {n + 16}\n")
            off += n + 16
        idx = "".join(lines).encode()
        for flags in (0, 1):
            save(out, "tfrecord_idx", f"{name}_{flags}.bin",
                 struct.pack("<I", len(idx)) + bytes([flags]) + idx + data)


def hdf5_seeds(out):
    """hdf5_fuzz.cc writes its base files itself with libhdf5 (as h5py does) and
    mutates only their data addresses and sizes: a seed is a base index and
    patches <selector><8 bytes> (a set top bit: a small delta)."""
    for base in range(10):
        save(out, "hdf5", f"base_{base}.bin", bytes([base]))
        for sel, delta in ((0x80, 1), (0x81, -1), (0x82, 4096), (0x83, -8)):
            save(out, "hdf5", f"base_{base}_{sel:x}_{delta}.bin",
                 bytes([base, sel]) + struct.pack("<q", delta))


def indexed_binary_seeds(out):
    """indexed_binary_fuzz.cc's input: <flags><u32 index length><index><data>.
    Megatron-LM's .idx as its _IndexWriter writes it (every dtype code, with and
    without the multimodal modes); DLIO's .off.idx + .sz.idx (flag bit 0) as its
    IndexedBinaryGenerator writes them, offsets restarting per written piece too."""
    rng = np.random.default_rng(3)
    codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
             8: np.uint16}
    for code, dtype in codes.items():
        for modes in (False, True):
            lengths = [int(n) for n in rng.integers(1, 6, size=4)]
            seqs = [rng.integers(0, 100, n).astype(dtype) for n in lengths]
            pointers = np.cumsum([0] + [s.nbytes for s in seqs[:-1]]).astype(np.int64)
            docs = np.array([0, 2, 4], np.int64)
            idx = (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(seqs), len(docs))
                   + np.array(lengths, np.int32).tobytes() + pointers.tobytes() + docs.tobytes()
                   + (np.zeros(len(seqs), np.int8).tobytes() if modes else b""))
            save(out, "indexed_binary", f"megatron_{code}_{int(modes)}",
                 bytes([0]) + struct.pack("<I", len(idx)) + idx + b"".join(s.tobytes() for s in seqs))
    n, size = 5, 6
    for name, offsets in (("strided", list(range(0, n * size, size))), ("restarted", [0, 6, 12, 0, 6])):
        idx = struct.pack(f"<{n}Q", *offsets) + struct.pack(f"<{n}Q", *([size] * n))
        save(out, "indexed_binary", f"dlio_{name}", bytes([1]) + struct.pack("<I", len(idx)) + idx
             + rng.integers(0, 255, n * size, dtype=np.uint8).tobytes())


def deflate_seeds(out):
    # Byte 0: bit 0 zlib-wrapped, the rest the output's capacity in KiB.
    import zlib
    rng = np.random.default_rng(5)
    planes = np.round(rng.standard_normal(4096), 2).astype(np.float32).view(np.uint8).reshape(-1, 4).T.tobytes()
    text = b"sample batch epoch shuffle " * 300
    for name, data in (("floats", planes), ("text", text), ("runs", bytes(5000) + b"x" * 3000)):
        cap = (len(data) + 1023) // 1024
        for level in (1, 9):
            save(out, "deflate", f"zlib_{name}_{level}", bytes([cap << 1 | 1]) + zlib.compress(data, level))
            c = zlib.compressobj(level, zlib.DEFLATED, -15)
            save(out, "deflate", f"raw_{name}_{level}", bytes([cap << 1]) + c.compress(data) + c.flush())
        c = zlib.compressobj(6, zlib.DEFLATED, -15, 8, zlib.Z_FIXED)
        save(out, "deflate", f"fixed_{name}", bytes([cap << 1]) + c.compress(data) + c.flush())


def dlfeed_seeds(out, tmp, binary):
    """Files dlfeed's own generator writes, one small dataset per format."""
    for fmt, target, ext in (("npy", "npy", ".npy"), ("npz", "npz", ".npz"), ("tfrecord", "tfrecord", ".tfrecord")):
        for extra in ([], ["--compression", "deflate"] if fmt == "npz" else []):
            d = tmp / f"gen_{fmt}_{len(extra)}"
            cmd = [binary, "generate", "--format", fmt, "--dir", str(d), "--files", "1",
                   "--samples-per-file", "3", "--shape", "4,2", *extra]
            subprocess.run(cmd, check=True, capture_output=True)
            for f in sorted(d.rglob(f"*{ext}")):
                data = f.read_bytes()
                if target == "tfrecord":
                    data = bytes([1]) + data
                save(out, target, f"dlfeed_{f.stem}_{len(extra)}{ext}", data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--dlfeed", help="the dlfeed binary, for its generator's files too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        npy_seeds(args.out)
        npz_seeds(args.out, tmp)
        hdf5_seeds(args.out)
        indexed_binary_seeds(args.out)
        tf_seeds(args.out, tmp)
        deflate_seeds(args.out)
        if args.dlfeed and os.path.exists(args.dlfeed):
            dlfeed_seeds(args.out, tmp, args.dlfeed)
    for d in sorted(args.out.iterdir()):
        print(f"{d.name}: {len(list(d.iterdir()))} seeds")


if __name__ == "__main__":
    main()
