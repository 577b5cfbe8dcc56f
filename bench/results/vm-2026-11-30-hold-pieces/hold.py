# SPDX-License-Identifier: Apache-2.0
# Loader::create with the dataset held (dlfeed run's default, resident auto): the binary before
# (/tmp/exp/dlfeed_rr) and after (/work/main/build/tools/dlfeed) large files were held in pieces
# by several threads; alternating rounds, medians of the create time (`indexed in` of run's output:
# Loader::create, the hold included).
# python hold.py FOLDER ROUNDS [cold]
import pathlib, re, subprocess, sys, statistics
sys.path.insert(0, "/work/main/bench")
import _benchlib as bl  # bench/_benchlib.py
folder = pathlib.Path(sys.argv[1]); rounds = int(sys.argv[2]); cold = len(sys.argv) > 3
B = {"before": "/tmp/exp/dlfeed_rr", "after": "/work/main/build/tools/dlfeed"}
got = {k: [] for k in B}
for r in range(rounds):
    for n in bl.rotated(list(B), r):
        if cold:
            bl.evict([folder])
        out = subprocess.run([B[n], "run", "--batch-size", "4", "--axis", "none", "--epochs", "1", str(folder)],
                             check=True, capture_output=True, text=True).stdout
        assert "dataset held in memory" in out, out
        got[n].append(float(re.search(r"indexed in ([0-9.]+) s", out).group(1)))  # Loader::create, hold included
for n, v in got.items():
    print(f"{n:7s} create median {statistics.median(v):.3f} s  {[round(x, 3) for x in v]}")
