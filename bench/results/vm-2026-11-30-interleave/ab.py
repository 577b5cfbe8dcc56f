# SPDX-License-Identifier: Apache-2.0
# Cold 64 MiB: two dlfeed binaries (large reads interleaved across a batch's files, or one file after
# the other), fio and the C yardstick in a rotated order each round, pages dropped before each; medians.
# python ab.py FOLDER ROUNDS  (binaries: /tmp/exp/dlfeed_rr, /tmp/exp/dlfeed_seq)
import json, pathlib, subprocess, sys, statistics
sys.path.insert(0, "/work/main/bench")
import _benchlib as bl  # bench/_benchlib.py
folder = pathlib.Path(sys.argv[1]); rounds = int(sys.argv[2])
files = sorted(str(p) for p in folder.iterdir() if p.name != ".written")
def fio():
    out = subprocess.run(["fio", "--name=cold", "--rw=read", "--bs=2M", "--iodepth=4", "--ioengine=io_uring", "--direct=0",
                          "--invalidate=1", "--output-format=json", f"--opendir={folder}"], capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["bw_bytes"] / 1e9
def run(name):
    subprocess.run([f"/tmp/exp/dlfeed_{name}", "run", "--strategy", "global_shuffle", "--batch-size", "4", "--epochs", "1",
                    "--resident", "off", "--axis", "none", "--summary-json", "/tmp/exp/s.json", str(folder)],
                   check=True, stdout=subprocess.DEVNULL)
    e = json.load(open("/tmp/exp/s.json"))["epochs"][0]
    return e["bytes_delivered"] / e["wall_s"] / 1e9
names0 = ["rr", "seq", "fio", "yard"]
got = {k: [] for k in names0}
for r in range(rounds):
    for n in bl.rotated(names0, r):
        bl.evict([folder])
        if n == "fio": got[n].append(fio())
        elif n == "yard": got[n].append(json.loads(bl.sh(["/work/main/build/bench/pread_yardstick", "--rounds", 1, *files]))["median_gb_per_s"])
        else: got[n].append(run(n))
for n, v in got.items():
    print(f"{n:5s} median {statistics.median(v):.2f} GB/s  {[round(x, 2) for x in v]}")
print("rr / fio, each round", [round(a / b, 2) for a, b in zip(got["rr"], got["fio"])])
print("seq / fio, each round", [round(a / b, 2) for a, b in zip(got["seq"], got["fio"])])
