# SPDX-License-Identifier: Apache-2.0
import json, subprocess, sys, statistics
sys.path.insert(0, "/work/main/bench")
import _benchlib as bl  # bench/_benchlib.py
folder = sys.argv[1]
def fio(extra):
    bl.evict([folder])
    out = subprocess.run(["fio", "--name=cold", "--rw=read", "--bs=2M", "--iodepth=4", "--ioengine=io_uring", "--direct=0",
                          "--output-format=json", f"--opendir={folder}", *extra], capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["bw_bytes"] / 1e9
got = {"rr": [], "seq": []}
for r in range(5):
    got["rr"].append(fio([])); got["seq"].append(fio(["--file_service_type=sequential"]))
for k, v in got.items(): print(k, round(statistics.median(v), 2), [round(x, 2) for x in v])
