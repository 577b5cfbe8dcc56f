# SPDX-License-Identifier: Apache-2.0
# One epoch of s3://bench/small/ (16 NPZ x 64 x 147 KiB, on a local SeaweedFS) by dlfeed.Loader,
# resident auto (held) or off: python held_one_epoch.py auto|off, with the AWS_* of the server.
import time, dlfeed, sys, json
res = sys.argv[1]
t0 = time.perf_counter()
l = dlfeed.Loader("s3://bench/small/", batch_size=64, strategy="global_shuffle", seed=1, resident=res)
t1 = time.perf_counter()
n = 0
for b in l:
    n += sum(v.nbytes for v in b.arrays().values())
t2 = time.perf_counter()
st = l.stats()
print(res, "open", round(t1-t0,3), "epoch", round(t2-t1,3), "MB/s", round(n/(t2-t0)/1e6), {k: st[k] for k in st if 'resident' in k or 'index' in k})
