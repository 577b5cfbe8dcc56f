#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/node_scaling.py for several wheels on one lent machine, one after the other:
#
#   bench/node_scaling_ab.sh [LABEL=]WHEEL_DIR[,...] OUT [NODE_SCALING_ARGS...]
#
# Installs each wheel into /tmp/ns_site/LABEL (no network, no dependencies),
# then runs `node_scaling.py --out OUT/LABEL --data /tmp/ns NODE_SCALING_ARGS`
# with that wheel, for each wheel in the order given (the data is written once
# and shared). Writes OUT/LABEL.md (the table) and prints every table; the
# json and the log stay in OUT/LABEL/ only when the run failed.
#   e.g. bench/node_scaling_ab.sh base=build-wheel/base,new=build-wheel/dist "$OUT" --groups E --rounds 3
set -uo pipefail
SPECS=${1:?usage: bench/node_scaling_ab.sh [LABEL=]WHEEL_DIR[,...] OUT [ARGS...]}
OUT=${2:?usage: bench/node_scaling_ab.sh [LABEL=]WHEEL_DIR[,...] OUT [ARGS...]}
shift 2
PY=${PYTHON:-python3}
SITE=/tmp/ns_site
mkdir -p "$OUT"
rc=0
IFS=, read -ra PARTS <<< "$SPECS"
for spec in "${PARTS[@]}"; do
  label=${spec%%=*}; dir=${spec#*=}
  [ "$label" = "$spec" ] && label=$(basename "$dir")
  rm -rf "${SITE:?}/$label"
  "$PY" -m pip install --quiet --no-index --no-deps --target "$SITE/$label" "$dir"/*.whl || exit 1
  mkdir -p "$OUT/$label"
  if PYTHONPATH="$SITE/$label" PYTHONUNBUFFERED=1 "$PY" bench/node_scaling.py --out "$OUT/$label" --data /tmp/ns "$@" \
      > "$OUT/$label/node_scaling.log" 2>&1; then
    mv "$OUT/$label/node_scaling.md" "$OUT/$label.md"
    rm -rf "${OUT:?}/$label"
  else
    rc=1
    echo "$label: node_scaling.py failed"; tail -20 "$OUT/$label/node_scaling.log"
  fi
  echo "== $label"; cat "$OUT/$label.md" 2>/dev/null
done
exit $rc
