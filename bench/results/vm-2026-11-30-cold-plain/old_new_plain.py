# SPDX-License-Identifier: Apache-2.0
# Cold 64 MiB: dlfeed variants vs fio, rotated rounds; medians.
import json, pathlib, subprocess, sys, statistics, os
sys.path.insert(0, "/work/main/bench")
import _benchlib as bl  # bench/_benchlib.py
DL = "/work/main/build/tools/dlfeed"
folder = pathlib.Path(sys.argv[1]); rounds = int(sys.argv[2])
variants = {
  "old": ["@old"],
  "new": [],
  "new_plain2m": ["--large-above", "0", "--split-above", "0", "--max-read", str(2 << 20)],
}
def fio():
    out = subprocess.run(["fio", "--name=cold", "--rw=read", "--bs=2M", "--iodepth=4", "--ioengine=io_uring", "--direct=0",
                          "--invalidate=1", "--output-format=json", f"--opendir={folder}"], capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["bw_bytes"] / 1e9
def run(extra):
    bl.evict([folder])
    s = "/tmp/exp/s.json"
    binary = "/tmp/exp/dlfeed_old" if extra[:1] == ["@old"] else DL
    extra = [x for x in extra if x != "@old"]
    subprocess.run([binary, "run", "--quiet", "--strategy", "global_shuffle", "--batch-size", "4", "--epochs", "1",
                    "--resident", "off", "--axis", "none", "--summary-json", s, *extra, str(folder)], check=True)
    e = json.load(open(s))["epochs"][0]
    return e["bytes_read"] / e["wall_s"] / 1e9, e.get("io_operations")
got = {k: [] for k in [*variants, "fio"]}
ops = {}
for r in range(rounds):
    names = [*variants, "fio"]; names = names[r % len(names):] + names[:r % len(names)]
    for n in names:
        if n == "fio": got[n].append(fio())
        else:
            v, o = run(variants[n]); got[n].append(v); ops[n] = o
for n, v in got.items():
    print(f"{n:12s} median {statistics.median(v):.2f} GB/s  {[round(x,2) for x in v]}  ops {ops.get(n)}")
