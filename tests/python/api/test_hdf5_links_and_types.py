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


def run_isolated(script, *args):
    # In a child with a time limit: libhdf5's open() of a FIFO would wait forever.
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=60)
    return proc.stdout + proc.stderr


READ_OR_SAY = ("import sys, dlfeed, numpy as np\n"
               "fields = sys.argv[2].split(',') if len(sys.argv) > 2 else None\n"
               "try:\n"
               "    l = dlfeed.Loader(sys.argv[1], batch_size=64, strategy='sequential', fields=fields)\n"
               "    print('read', [float(np.array(b[k]).sum()) for b in l for k in b.keys()])\n"
               "except dlfeed.Error as e:\n    print('error', e)\n")


def write_vds(path, source, shape):
    """`path`'s float32 dataset "records": a virtual dataset of `source`'s "data", whole."""
    layout = h5py.VirtualLayout(shape=shape, dtype="<f4")
    layout[:] = h5py.VirtualSource(str(source), "data", shape=shape)
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("records", layout)


def test_a_file_libhdf5_opens_itself_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    # An external link's target, an external raw-data file and a virtual dataset's source are
    # opened by libhdf5 with a plain open(), which waits on a FIFO: refused first, naming it.
    import os
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = x
        f["ext"] = h5py.ExternalLink("other.h5", "/real")
    os.mkfifo(tmp_path / "other.h5")
    out = run_isolated(READ_OR_SAY, tmp_path / "a.h5", "ext")
    assert f"a.h5: dataset 'ext' is an external link to '/real' in {tmp_path}/other.h5 (a FIFO), which is not a " \
           "regular file" in out, out
    out = run_isolated(READ_OR_SAY, tmp_path / "a.h5")
    assert "links libhdf5 cannot open: ext (an external link to '/real'" in out, out
    assert run_isolated(READ_OR_SAY, tmp_path / "a.h5", "x").startswith("read [66.0]")

    (tmp_path / "raw.bin").write_bytes(x.tobytes())
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f.create_dataset("records", shape=(3, 4), dtype="<f4", external=[("raw.bin", 0, x.nbytes)])
    out = run_isolated(READ_OR_SAY, tmp_path / "b.h5")  # libhdf5 looks for raw.bin in the working directory
    assert "b.h5: expected H5Dread of sample 0 of 'records', found libhdf5 error: unable to open external raw" in out
    os.chdir(tmp_path)
    assert run_isolated(READ_OR_SAY, "b.h5").startswith("read [66.0]")
    os.remove(tmp_path / "raw.bin")
    os.mkfifo(tmp_path / "raw.bin")
    out = run_isolated(READ_OR_SAY, "b.h5")
    assert "b.h5: dataset 'records': its external raw-data file 'raw.bin' is raw.bin (a FIFO)" in out, out

    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["data"] = x
    write_vds(tmp_path / "v.h5", tmp_path / "src.h5", (3, 4))
    assert run_isolated(READ_OR_SAY, tmp_path / "v.h5").startswith("read [66.0]")
    os.remove(tmp_path / "src.h5")
    os.mkfifo(tmp_path / "src.h5")
    out = run_isolated(READ_OR_SAY, tmp_path / "v.h5")
    assert f"v.h5: dataset 'records': its virtual source file '{tmp_path}/src.h5' is {tmp_path}/src.h5 (a FIFO)" \
        in out, out


def test_the_link_check_follows_libhdf5s_search(tmp_path, monkeypatch):
    # From review: an absolute link target that is missing is tried by its name in the working
    # directory, where a FIFO hung; a VDS source dataset behind an external link to a FIFO hung
    # (libhdf5 opens it without the link check); a directory of the link's name in the working
    # directory, which libhdf5 never reaches (the file beside the parent comes first), was refused.
    import os
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with h5py.File(tmp_path / "abs.h5", "w") as f:
        f["x"] = x
        f["ext"] = h5py.ExternalLink("/nonexistent/dir/other.h5", "/x")
    os.mkfifo(work / "other.h5")
    assert run_isolated(READ_OR_SAY, tmp_path / "abs.h5", "x").startswith("read [6.0]")
    out = run_isolated(READ_OR_SAY, tmp_path / "abs.h5", "ext")
    assert "external link to '/x' in other.h5 (a FIFO)" in out, out

    with h5py.File(tmp_path / "target.h5", "w") as f:
        f["x"] = x
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["data"] = h5py.ExternalLink("target.h5", "/x")
    write_vds(tmp_path / "v.h5", tmp_path / "src.h5", (2, 2))
    assert run_isolated(READ_OR_SAY, tmp_path / "v.h5").startswith("read [6.0]")
    os.remove(tmp_path / "target.h5")
    os.mkfifo(tmp_path / "target.h5")
    out = run_isolated(READ_OR_SAY, tmp_path / "v.h5")
    assert "dataset 'data' is an external link to '/x' in " in out and "target.h5 (a FIFO)" in out, out

    d = tmp_path / "d"
    d.mkdir()
    with h5py.File(d / "shard.h5", "w") as f:
        f["x"] = x
    with h5py.File(d / "a.h5", "w") as f:
        f["records"] = h5py.ExternalLink("shard.h5", "/x")
    (work / "shard.h5").mkdir()
    assert run_isolated(READ_OR_SAY, d / "a.h5").startswith("read [6.0]")

    # A regular file that is not HDF5 does not end libhdf5's search: a FIFO after it is reached.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "t.h5").write_bytes(b"not hdf5")
    e = tmp_path / "e"
    e.mkdir()
    with h5py.File(e / "p.h5", "w") as f:
        f["x"] = h5py.ExternalLink(str(tmp_path / "other" / "t.h5"), "/d")
    os.mkfifo(e / "t.h5")
    out = run_isolated(READ_OR_SAY, e / "p.h5", "x")
    assert f"{e}/t.h5 (a FIFO)" in out, out
