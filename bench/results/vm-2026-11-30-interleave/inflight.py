# SPDX-License-Identifier: Apache-2.0
# Cold 64 MiB, one binary: the device's reads in flight (/sys/block/vda/inflight every 2 ms) during
# one epoch, in 50 ms buckets. python inflight.py FOLDER rr|seq RUNS
import json, pathlib, subprocess, sys, time, threading
sys.path.insert(0, "/work/main/bench")
import _benchlib as bl
folder = pathlib.Path(sys.argv[1]); name = sys.argv[2]; n = int(sys.argv[3])
for i in range(n):
    bl.evict([folder]); time.sleep(0.3)
    samples = []; stop = False
    def sampler():
        while not stop:
            r, w = open("/sys/block/vda/inflight").read().split()
            samples.append((time.perf_counter(), int(r)))
            time.sleep(0.002)
    t = threading.Thread(target=sampler); t.start()
    t0 = time.perf_counter()
    subprocess.run([f"/tmp/exp/dlfeed_{name}", "run", "--strategy", "global_shuffle", "--batch-size", "4", "--epochs", "1",
                    "--resident", "off", "--axis", "none", "--summary-json", "/tmp/exp/s.json", str(folder)], check=True, stdout=subprocess.DEVNULL)
    stop = True; t.join()
    e = json.load(open("/tmp/exp/s.json"))["epochs"][0]
    rate = e["bytes_delivered"]/e["wall_s"]/1e9
    xs = [r for (tt, r) in samples]
    # 50 ms buckets of mean inflight
    b = {}
    for tt, r in samples: b.setdefault(int((tt - t0) / 0.05), []).append(r)
    print(name, round(rate, 2), "wall", round(e["wall_s"], 2), "mean inflight", round(sum(xs)/len(xs), 1), "buckets", [round(sum(v)/len(v)) for k, v in sorted(b.items())])
