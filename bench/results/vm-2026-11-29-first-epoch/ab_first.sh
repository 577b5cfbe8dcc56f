#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The first epoch's rate against the later ones', two builds side by side:
#   bash ab_first.sh SET_FOLDER [dlfeed run flags]   (BASE, NEW: build folders)
BASE=${BASE:-/tmp/base/build}
NEW=${NEW:-build}
for r in 1 2 3 4 5; do
  for b in "$BASE" "$NEW"; do
    "$b/tools/dlfeed" run --quiet --strategy global_shuffle --batch-size 64 --epochs 3 \
      --summary-json /tmp/ab_first.json --resident off "$@" >/dev/null 2>&1
    python3 -c "
import json, statistics as st, sys
s = json.load(open('/tmp/ab_first.json'))
w = [e['wall_s'] for e in s['epochs']]
print(sys.argv[1], 'index %.3f' % (s['counters']['open_ns']['value'] / 1e9),
      'first/later %.2f' % (st.median(w[1:]) / w[0]), [round(x * 1000) for x in w])" "$b"
  done
done | sort
