#!/usr/bin/env bash
# The surviving DDP job (tests/python/test_survive.py) N times in a row (default 10), each
# with a fresh random seed (printed on failure), over shared memory and with COMMUX_SHM=0.
# Stops at the first failure. docs/fault-tolerance.md records a run.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
for i in $(seq 1 "$runs"); do
  printf 'run %d/%d: ' "$i" "$runs"
  python3 -m pytest -q -p no:cacheprovider tests/python/test_survive.py 2>&1 | tail -1
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
done
