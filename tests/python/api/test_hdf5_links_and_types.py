# SPDX-License-Identifier: Apache-2.0
"""HDF5 files whose bytes are not where the file's own offsets say, or whose values
libhdf5 would not give as IEEE numbers, written by h5py: never read as if they were.
- a dataset behind an external link lives in the linked file (read through libhdf5);
- a float type with IEEE's fields but another exponent bias is refused;
- storage never written, in a dataset whose fill time is "never", is refused;
- a link libhdf5 cannot open is never passed over for the one dataset left."""
import numpy as np
import pytest

import dlfeed as dl

h5py = pytest.importorskip("h5py")


def batches(path, **kw):
    loader = dl.Loader(str(path), batch_size=64, strategy="sequential", **kw)
    out = [{k: np.array(b[k]) for k in b.keys()} for b in loader]
    loader.close()
    return out


@pytest.mark.parametrize("chunks", [None, (3, 5)])
def test_a_dataset_behind_an_external_link_is_read_from_the_linked_file(tmp_path, chunks):
    x = np.arange(20 * 5, dtype=np.float32).reshape(20, 5)
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.create_dataset("real", data=x, chunks=chunks)
    with h5py.File(tmp_path / "data.h5", "w") as f:
        f["pad"] = np.full((50,), 7, dtype=np.int64)  # bytes where the linked dataset's offset points here
        f["records"] = h5py.ExternalLink("other.h5", "/real")
    (b,) = batches(tmp_path / "data.h5", fields=["records"])
    assert np.array_equal(b["records"], x)


def test_a_float_type_with_another_exponent_bias_is_refused(tmp_path):
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_ebias(100)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        d = h5py.h5d.create(f.id, b"records", t, h5py.h5s.create_simple((4, 3)))
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(12, dtype=np.float32).reshape(4, 3), mtype=t)
    with h5py.File(tmp_path / "f.h5") as f:  # libhdf5 converts it: not the IEEE reading of the bytes
        assert not np.array_equal(f["records"][...], np.arange(12, dtype=np.float32).reshape(4, 3))
    with pytest.raises(dl.InvalidArgumentError, match=r"f\.h5: dataset 'records'.*non-IEEE 4-byte float.*biased by 100"):
        batches(tmp_path / "f.h5")


def test_storage_never_written_without_a_fill_value_is_refused(tmp_path):
    with h5py.File(tmp_path / "fill.h5", "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((2, 3))
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        dcpl.set_fill_value(np.array(9, dtype=np.float32))
        d = h5py.Dataset(h5py.h5d.create(f.id, b"records", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((6, 3)),
                                         dcpl=dcpl))
        d[0:2] = 1.0  # rows 2-5 never written
    with pytest.raises(dl.InvalidArgumentError, match=r"fill\.h5: dataset 'records' has storage never written .*"
                                                      r"fill time is 'never'"):
        batches(tmp_path / "fill.h5")
    # Written whole, the same dataset reads.
    with h5py.File(tmp_path / "fill.h5", "a") as f:
        f["records"][2:6] = 2.0
    (b,) = batches(tmp_path / "fill.h5", fields=["records"])
    assert np.array_equal(b["records"], np.repeat([1.0, 2.0], [6, 12]).reshape(6, 3).astype(np.float32))


def test_a_link_libhdf5_cannot_open_is_never_passed_over(tmp_path):
    with h5py.File(tmp_path / "dangling.h5", "w") as f:
        f["other"] = np.zeros(10)
        f["data"] = h5py.ExternalLink("missing.h5", "/x")
    with pytest.raises(dl.InvalidArgumentError, match="one dataset libhdf5 can open, 'other', beside links it "
                                                      "cannot.*links libhdf5 cannot open: data"):
        batches(tmp_path / "dangling.h5")
    with pytest.raises(dl.InvalidArgumentError, match="dataset 'data' cannot be opened by this libhdf5"):
        batches(tmp_path / "dangling.h5", fields=["data"])
    (b,) = batches(tmp_path / "dangling.h5", fields=["other"])  # named, the readable one reads
    assert np.array_equal(b["other"], np.zeros(10))
