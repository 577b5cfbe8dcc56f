# SPDX-License-Identifier: Apache-2.0
"""`dlfeed order`: ranks' outputs partition the epoch; --stats prints the figures."""
import pytest

STRATEGIES = ["sequential", "file_shuffle", "local_shuffle", "buffered_shuffle",
              "block_shuffle", "global_shuffle", "global_feistel"]


def ids(dlfeed, *args):
    return [int(x) for x in dlfeed.run("order", *args).stdout.split()]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("world", [1, 3, 4])
def test_ranks_cover_every_id_once(dlfeed, strategy, world):
    common = ["--files", 6, "--samples-per-file", 10, "--strategy", strategy, "--seed", 5,
              "--epoch", 2, "--world-size", world, "--drop-last",
              "--buffer-size", 8, "--block-size", 4, "--window", 2]
    shards = [ids(dlfeed, *common, "--rank", r) for r in range(world)]
    assert len({len(s) for s in shards}) == 1
    seen = [i for s in shards for i in s]
    assert len(seen) == len(set(seen))
    # 60 samples split evenly over 1, 3 or 4 ranks; local_shuffle splits
    # 6 files, unevenly over 4 ranks (drop_last then drops samples).
    if strategy != "local_shuffle" or 6 % world == 0:
        assert sorted(seen) == list(range(60))
    # Same parameters, same order.
    assert shards[0] == ids(dlfeed, *common, "--rank", 0)


def test_limit_and_world_size_independence(dlfeed):
    base = ["--files", 5, "--samples-per-file", 20, "--strategy", "global_feistel", "--seed", 9]
    full = ids(dlfeed, *base)
    assert sorted(full) == list(range(100))
    assert ids(dlfeed, *base, "--limit", 7) == full[:7]
    rank2 = ids(dlfeed, *base, "--world-size", 4, "--rank", 2)
    assert rank2 == full[2::4]


def test_stats(dlfeed):
    out = dlfeed.run("order", "--files", 10, "--samples-per-file", 100, "--strategy", "sequential",
                     "--stats", "--batch-size", 50).stdout
    stats = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert stats["strategy"] == "sequential"
    assert float(stats["mean_displacement"]) == 0.0
    assert float(stats["rank_correlation"]) == pytest.approx(1.0)
    assert float(stats["distinct_files_per_batch"]) == pytest.approx(1.0)
    shuffled = dlfeed.run("order", "--files", 10, "--samples-per-file", 100, "--strategy",
                          "global_shuffle", "--stats").stdout
    assert "same_file_fraction" in shuffled


def test_errors(dlfeed):
    assert "unknown order strategy" in dlfeed.error("order", "--files", 2, "--samples-per-file", 2,
                                                    "--strategy", "nope")
    assert "rank" in dlfeed.error("order", "--files", 2, "--samples-per-file", 2,
                                  "--rank", 3, "--world-size", 2)


def test_limits_and_generated_shapes_that_cannot_be_are_errors(dlfeed, tmp_path):
    """--limit 0 printed every id (as -1 does), -7 too; inspect --dump-sample -2 was ignored; generate wrote a
    header-only file and said it wrote the files for a shape whose file passes 2^64 bytes, wrote empty
    samples dlfeed then refuses, and failed --level 99 as "zlib deflateInit2 failed"."""
    base = ["order", "--files", 2, "--samples-per-file", 4]
    assert dlfeed.run(*base, "--limit", 0).stdout == ""
    assert len(dlfeed.run(*base, "--limit", 3).stdout.split()) == 3
    assert "--limit -7: 0 or more, or -1 for all" in dlfeed.error(*base, "--limit", -7)
    gen = ["generate", "--files", 1, "--samples-per-file", 2]
    dlfeed.run(*gen, "--format", "npy", "--shape", "4,4", "--dir", tmp_path / "ok")
    err = dlfeed.error("inspect", tmp_path / "ok", "--dump-sample", -2, "--out", tmp_path / "o.bin")
    assert "--dump-sample -2: 0 or more (-1: none)" in err
    for fmt in ("npy", "npz", "tfrecord", "indexed_binary", "hdf5"):
        err = dlfeed.error(*gen, "--format", fmt, "--shape", "4294967296,4294967296", "--dir", tmp_path / fmt)
        assert "a file of more than 2^63 bytes" in err, (fmt, err)
    assert "every dimension is at least 1" in dlfeed.error(*gen, "--format", "npy", "--shape", "4,0", "--dir",
                                                           tmp_path / "z")
    assert "--level 99: a deflate level is 1 to 9" in dlfeed.error(*gen, "--format", "npz", "--compression",
                                                                   "deflate", "--level", 99, "--dir", tmp_path / "l")
