# SPDX-License-Identifier: Apache-2.0
# The Python loader's cost per batch: the package at 2914340 (git archive into /tmp/pyold) against
# the working tree's, the same compiled module (build/python), in alternating rounds. First:
#   mkdir -p /tmp/pyold && git archive 2914340 python/dlfeed | tar -x -C /tmp/pyold
import os, subprocess, sys, json, statistics
import numpy as np
d = "/tmp/pyover_data"
if not os.path.exists(d + "/done"):
    os.makedirs(d, exist_ok=True)
    for i in range(4):
        np.save(f"{d}/x{i}.npy", np.random.default_rng(i).random((131072, 8), dtype=np.float32))
    open(d + "/done", "w").close()
child = r'''
import time, dlfeed, sys
l = dlfeed.Loader(sys.argv[1], batch_size=256, strategy="global_shuffle", seed=1, resident="auto")
for b in l: pass
t = time.perf_counter(); n = 0
for e in range(3):
    for b in l: n += 1
print(n / (time.perf_counter() - t))
'''
res = {"old": [], "new": []}
for r in range(5):
    for name, py in (("old", "/tmp/pyold/python"), ("new", "/work/main/python")):
        env = dict(os.environ, PYTHONPATH=f"{py}:/work/main/build/python")
        out = subprocess.run([sys.executable, "-c", child, d], env=env, capture_output=True, text=True, check=True)
        res[name].append(float(out.stdout))
print(json.dumps({k: [round(v) for v in vs] for k, vs in res.items()}))
print("batches/s median old %.0f new %.0f ratio %.3f" % (statistics.median(res["old"]), statistics.median(res["new"]),
      statistics.median(res["new"]) / statistics.median(res["old"])))
