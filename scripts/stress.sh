#!/usr/bin/env bash
# Long randomized stress of commux (tests/python/stress_job.py): one seed after another,
# cycling world sizes, COMMUX_SHM on and off and (--hog) a busy-looping process beside the
# ranks, every result checked exactly. Stops at the first wrong result or hang and prints
# the seed and the command that replays it; on a hang, every rank's Python stacks and the
# native stacks of all its threads (gdb, else py-spy) are written to a file first.
#
#   scripts/stress.sh --minutes 60 [--ranks 2,3,4] [--hog] [--shm 1,0] [--hosts cycle]
#                     [--ops 400] [--first-seed N] [--stall 60] [--timeout 600] [--out DIR]
#
# Any other option of stress_job.py passes through (python3 tests/python/stress_job.py -h).
# It ends with "stress: N runs, F failures, M ops in T s"; exit status 1 on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# Native stacks are what a hang in the C++ threads needs; gdb is the first choice.
if ! command -v gdb >/dev/null && ! command -v py-spy >/dev/null; then
  echo "stress: neither gdb nor py-spy found; installing py-spy for native stack dumps" >&2
  "$PY" -m pip install -q py-spy >&2 || echo "stress: no py-spy either: hangs get Python stacks only" >&2
fi

args=("$@")
has_minutes=0
for a in "${args[@]}"; do
  if [[ $a == --minutes || $a == --minutes=* || $a == --seed || $a == --seed=* ]]; then has_minutes=1; fi
done
if [[ $has_minutes == 0 ]]; then args=(--minutes 60 "${args[@]}"); fi
if [[ " ${args[*]} " != *" --ranks"* ]]; then args+=(--ranks 2,3,4); fi

exec "$PY" tests/python/stress_job.py "${args[@]}"
