# SPDX-License-Identifier: Apache-2.0
"""Indexed binary datasets, as their writers lay them out: Megatron-LM's indexed
dataset (PREFIX.bin + PREFIX.idx, written here the way megatron/core/datasets/
indexed_dataset.py's IndexedDatasetBuilder and _IndexWriter write them) and DLIO
2.0.0's indexed_binary / mmap_indexed_binary (NAME + NAME.off.idx + NAME.sz.idx, the
way data_generator/indexed_binary_generator.py writes them). Each sequence is one
1-D sample, read back byte for byte; malformed indexes are errors naming the file,
the offset and what was expected."""
import pathlib
import struct

import numpy as np
import pytest

import dlfeed

MAGIC = b"MMIDIDX\x00\x00"
# Megatron's DType enum: the code written in the header.
CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6, np.float32: 7, np.uint16: 8}


class MegatronBuilder:
    """IndexedDatasetBuilder: add_item() appends a sequence's elements to the
    .bin, end_document() closes a document; finalize() writes the .idx as
    _IndexWriter does (header, lengths int32, pointers int64, document
    indices int64, then the modes int8 when multimodal)."""

    def __init__(self, bin_path, dtype, multimodal=False):
        self.data = open(bin_path, "wb")
        self.dtype = dtype
        self.multimodal = multimodal
        self.lengths, self.modes, self.documents = [], [], [0]

    def add_item(self, tokens, mode=0):
        arr = np.array(tokens, dtype=self.dtype)
        self.data.write(arr.tobytes(order="C"))
        self.lengths.append(arr.size)
        self.modes.append(mode)

    def end_document(self):
        self.documents.append(len(self.lengths))

    def finalize(self, idx_path):
        self.data.close()
        itemsize = np.dtype(self.dtype).itemsize
        pointers, at = [], 0
        for n in self.lengths:
            pointers.append(at)
            at += n * itemsize
        with open(idx_path, "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", CODES[self.dtype]))
            f.write(struct.pack("<Q", len(self.lengths)))
            f.write(struct.pack("<Q", len(self.documents)))
            f.write(np.array(self.lengths, dtype=np.int32).tobytes(order="C"))
            f.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
            f.write(np.array(self.documents, dtype=np.int64).tobytes(order="C"))
            if self.multimodal:
                f.write(np.array(self.modes, dtype=np.int8).tobytes(order="C"))


def write_megatron(prefix, sequences, dtype, docs_every=2, multimodal=False):
    b = MegatronBuilder(f"{prefix}.bin", dtype, multimodal)
    for i, s in enumerate(sequences):
        b.add_item(s, mode=i % 2)
        if (i + 1) % docs_every == 0 or i + 1 == len(sequences):
            b.end_document()
    b.finalize(f"{prefix}.idx")


def write_dlio(path, num_samples, dim1, dim2, memory_size=2 * 1073741824):
    """IndexedBinaryGenerator.generate()'s single-rank branch for one file:
    uint8 records drawn with np.random (seed 10), written in pieces of at most
    `memory_size` bytes (generation_buffer_size), with each piece's offsets
    counted from 0 as DLIO counts them. Returns (data bytes, offsets, sizes)."""
    np.random.seed(10)
    sample_size = dim1 * dim2
    total_size = sample_size * num_samples
    write_size = total_size
    if total_size > memory_size:
        write_size = memory_size - (memory_size % sample_size)
    written, data, offsets_all, sizes_all = 0, b"", [], []
    records = np.random.randint(255, size=write_size, dtype=np.uint8)
    with open(path, "wb") as data_file, open(f"{path}.off.idx", "wb") as off_file, \
            open(f"{path}.sz.idx", "wb") as sz_file:
        while written < total_size:
            data_to_write = write_size if written + write_size <= total_size else total_size - written
            samples_to_write = data_to_write // sample_size
            chunk = struct.pack("B" * data_to_write, *records[:data_to_write])
            data_file.write(chunk)
            data += chunk
            offsets = list(range(0, data_to_write, sample_size))[:samples_to_write]
            off_file.write(struct.pack("Q" * samples_to_write, *offsets))
            sz_file.write(struct.pack("Q" * samples_to_write, *([sample_size] * samples_to_write)))
            offsets_all += offsets
            sizes_all += [sample_size] * samples_to_write
            written += data_to_write
    np.random.seed()
    return data, offsets_all, sizes_all


def read_all(path, **kw):
    """{sample id: 1-D array} over one epoch."""
    loader = dlfeed.Loader(path, batch_size=3, ragged=True, **kw)
    out = {}
    for batch in loader:
        field = batch[0]
        for i, sid in enumerate(batch.sample_ids):
            out[int(sid)] = np.array(field[i])
    return loader, out


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.float32, np.int64])
@pytest.mark.parametrize("multimodal", [False, True])
def test_megatron_sequences_read_back_exactly(tmp_path, dtype, multimodal):
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, 50000, size=int(n)).astype(dtype) for n in rng.integers(1, 40, size=11)]
    write_megatron(tmp_path / "corpus_text_document", seqs, dtype, multimodal=multimodal)
    loader, got = read_all(tmp_path / "corpus_text_document.bin", strategy="global_shuffle", seed=3)
    assert loader.field_names == ["data"]
    name, dt, shape = loader.field_specs()[0]
    assert dt == np.dtype(dtype) and shape == (None,)
    assert sorted(got) == list(range(len(seqs)))
    for k, s in enumerate(seqs):
        assert got[k].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got[k], s)


def test_megatron_ragged_is_asked_for_and_a_folder_takes_bin_idx_pairs(tmp_path):
    write_megatron(tmp_path / "a", [[1, 2, 3], [4, 5]], np.uint16)
    write_megatron(tmp_path / "b", [[6], [7, 8, 9, 10]], np.uint16)
    (tmp_path / "stray.bin").write_bytes(b"not a dataset")  # no stray.idx: not taken
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        dlfeed.Loader(tmp_path)
    assert "ragged" in str(e.value) and "a.bin" in str(e.value)
    loader, got = read_all(tmp_path)
    assert [got[k].tolist() for k in range(4)] == [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]]
    # Sequences of one length need no ragged.
    one = tmp_path / "one"
    one.mkdir()
    write_megatron(one / "c", [[1, 2], [3, 4], [5, 6]], np.int32)
    loader = dlfeed.Loader(one, batch_size=3)
    assert loader.field_specs()[0][2] == (2,)
    assert np.array(next(iter(loader))[0]).tolist() == [[1, 2], [3, 4], [5, 6]]


@pytest.mark.parametrize("ext", ["indexed_binary", "mmap_indexed_binary"])
def test_dlio_files_read_back_exactly(tmp_path, ext):
    train = tmp_path / "data" / "train"
    train.mkdir(parents=True)
    path = train / f"img_0_of_1.{ext}"
    data, offsets, sizes = write_dlio(path, 6, 5, 7)
    assert len(data) == 6 * 35 and offsets == [35 * k for k in range(6)]
    loader, got = read_all(tmp_path / "data", strategy="global_shuffle", seed=2)
    assert loader.field_specs()[0][1:] == (np.dtype("u1"), (35,))
    for k in range(6):
        assert got[k].tobytes() == data[offsets[k]:offsets[k] + sizes[k]]


def test_dlio_pieces_restart_their_offsets_and_are_read_as_indexed(tmp_path):
    # A file larger than generation_buffer_size is written in pieces whose
    # offsets DLIO counts from 0 again: the index says what a sample is, and
    # dlfeed reads what it says (as DLIO's readers do).
    path = tmp_path / "img_0_of_1.indexed_binary"
    data, offsets, sizes = write_dlio(path, 7, 4, 4, memory_size=50)  # pieces of 3 samples (48 bytes)
    assert offsets == [0, 16, 32, 0, 16, 32, 0]
    _, got = read_all(path)
    for k in range(7):
        assert got[k].tobytes() == data[offsets[k]:offsets[k] + sizes[k]]


def idx_bytes(prefix):
    return bytearray(pathlib.Path(f"{prefix}.idx").read_bytes())


@pytest.mark.parametrize("change,offset,words", [
    (lambda b: b.__setitem__(slice(0, 9), b"MMIDIDY\x00\x00"), 0, ["magic"]),
    (lambda b: b.__setitem__(slice(9, 17), struct.pack("<Q", 2)), 9, ["version 1", "version 2"]),
    (lambda b: b.__setitem__(17, 9), 17, ["dtype code", "code 9"]),
    (lambda b: b.__setitem__(slice(18, 26), struct.pack("<Q", 4)), 18, ["fill the", "4 sequences"]),
    (lambda b: b.__setitem__(slice(34 + 12 + 8, 34 + 12 + 16), struct.pack("<q", 1000)), 34 + 12 + 8,
     ["sequence 1 within", "offset 1000"]),
    (lambda b: b.__setitem__(slice(34 + 36 + 8, 34 + 36 + 16), struct.pack("<q", 2)), 34 + 36 + 8,
     ["document index entry 1", "found 2"]),
    (lambda b: b.__setitem__(slice(34, 38), struct.pack("<i", -1)), 34, ["sequence 0's length", "-1"]),
    (lambda b: (b.__setitem__(slice(26, 34), struct.pack("<Q", 0)), b.__delitem__(slice(len(b) - 16, len(b)))), 26,
     ["at least one entry", "a document count of 0"]),
])
def test_a_malformed_megatron_index_names_file_offset_and_expectation(tmp_path, change, offset, words):
    prefix = tmp_path / "bad"
    write_megatron(prefix, [[1, 2], [3, 4, 5], [6]], np.uint16, docs_every=3)  # documents [0, 3]: D = 2
    b = idx_bytes(prefix)
    change(b)
    pathlib.Path(f"{prefix}.idx").write_bytes(bytes(b))
    with pytest.raises(dlfeed.DataError) as e:
        dlfeed.Loader(f"{prefix}.bin", ragged=True)
    msg = str(e.value)
    assert f"{prefix}.idx" in msg and f"at offset {offset}:" in msg and "expected" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_truncated_or_missing_indexes_are_named(tmp_path):
    prefix = tmp_path / "t"
    write_megatron(prefix, [[1, 2], [3]], np.uint16)
    whole = pathlib.Path(f"{prefix}.idx").read_bytes()
    pathlib.Path(f"{prefix}.idx").write_bytes(whole[:20])
    with pytest.raises(dlfeed.DataError) as e:
        dlfeed.Loader(f"{prefix}.bin", format="indexed_binary", ragged=True)
    assert f"{prefix}.idx" in str(e.value) and "at offset 0" in str(e.value)
    pathlib.Path(f"{prefix}.idx").write_bytes(whole[:-3])
    with pytest.raises(dlfeed.DataError) as e:
        dlfeed.Loader(f"{prefix}.bin", ragged=True)
    assert f"{prefix}.idx" in str(e.value) and "at offset 18" in str(e.value)
    # DLIO's: a missing size index, sizes that do not pair with the offsets.
    path = tmp_path / "img_0_of_1.indexed_binary"
    write_dlio(path, 4, 3, 3)
    sz = pathlib.Path(f"{path}.sz.idx")
    sizes = sz.read_bytes()
    sz.unlink()
    with pytest.raises(dlfeed.NotFoundError) as e:
        dlfeed.Loader(path)
    assert f"{path}.sz.idx" in str(e.value)
    sz.write_bytes(sizes[:-8])
    with pytest.raises(dlfeed.DataError) as e:
        dlfeed.Loader(path)
    assert f"{path}.sz.idx" in str(e.value) and "at offset 24" in str(e.value) and "4 sizes" in str(e.value)
    sz.write_bytes(sizes[:-8] + struct.pack("<Q", 10))  # the last sample runs past the data
    with pytest.raises(dlfeed.DataError) as e:
        dlfeed.Loader(path)
    assert f"{path}.off.idx" in str(e.value) and "at offset 24" in str(e.value) and "sequence 3" in str(e.value)
