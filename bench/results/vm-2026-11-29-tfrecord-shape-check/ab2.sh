#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The per-record shape-feature check, side by side: this build vs the same build with the check's call compiled out
# (/tmp/tfm/dlfeed_nocheck); DLIO-like TFRecord (16,384 records of 32x32 uint8 + size, shape from `size`), resident
# off, 40 epochs, batch 64; 7 alternating pairs; samples/s of epochs >= 1.
for k in 1 2 3 4 5 6 7; do
  for b in check nocheck; do
    bin=/work/main/build/tools/dlfeed; [ $b = nocheck ] && bin=/tmp/tfm/dlfeed_nocheck
    $bin run --fields image --resident off --epochs 40 --batch-size 64 --summary-json /tmp/tfm/t_${b}_$k.json \
      /tmp/tfm/data/train > /dev/null 2>&1
  done
done
python3 - <<'PY'
import json, statistics
def rate(p):
    e = json.load(open(p))["epochs"][1:]
    return sum(x["samples"] for x in e) / sum(x["wall_s"] for x in e)
r = {b: [rate(f"/tmp/tfm/t_{b}_{k}.json") for k in range(1, 8)] for b in ("check", "nocheck")}
q = [a / b for a, b in zip(r["check"], r["nocheck"])]
print("check", [round(x) for x in r["check"]]); print("nocheck", [round(x) for x in r["nocheck"]])
print("check/nocheck", [round(x, 3) for x in q], "median", round(statistics.median(q), 3))
PY
