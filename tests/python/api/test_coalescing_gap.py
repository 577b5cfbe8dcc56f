# SPDX-License-Identifier: Apache-2.0
"""The coalescing gap (CoalesceOptions.adaptive_gap): small samples read in a
global shuffle from a file h5py wrote, not held in memory, read about the
bytes they hold; a fixed 64 KiB gap reads the gaps between them too."""
import h5py
import numpy as np

import dlfeed


def read_amplification(path, **options):
    loader = dlfeed.Loader(path, fields=["x"], batch_size=512, strategy="global_shuffle", seed=4, resident="off",
                           **options)
    seen = {}
    for batch in loader:
        for i, sid in enumerate(batch.sample_ids):
            seen[int(sid)] = np.array(batch[0][i])
    stats = loader.stats()
    return stats["bytes_read"] / stats["bytes_delivered"], seen


def test_small_samples_read_about_their_bytes(tmp_path):
    data = np.random.default_rng(0).integers(0, 2**31, size=(8192, 256), dtype=np.int32)  # 1 KiB samples
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("x", data=data)
    adaptive, seen = read_amplification(tmp_path / "d.h5")
    assert sorted(seen) == list(range(8192))
    for sid, value in seen.items():
        np.testing.assert_array_equal(value, data[sid])
    fixed, _ = read_amplification(tmp_path / "d.h5", adaptive_gap=False)
    assert adaptive <= 2.0, adaptive
    assert fixed > 4.0, fixed  # 512 random samples of 8192: neighbours ~16 KiB apart, all within 64 KiB
