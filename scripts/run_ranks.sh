#!/usr/bin/env bash
# Runs N copies of a program as one job on this host, meeting through COMMUX_BOOTSTRAP
# (the C API's init from the environment) on a free port; fails unless every rank exits 0
# within TIMEOUT seconds (default 60), killing the rest at the limit.
#
#   scripts/run_ranks.sh N program [args...]
set -euo pipefail
ranks=$1
shift
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < ranks; r++)); do
  COMMUX_BOOTSTRAP=127.0.0.1:$port COMMUX_SIZE=$ranks COMMUX_RANK=$r \
    timeout "${TIMEOUT:-60}" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
