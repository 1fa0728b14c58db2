#!/usr/bin/env bash
# MPI RMA (commux.bench.window_mpi) between two namespace "hosts": the MPI column for the
# window benchmark across hosts, beside
#   scripts/multihost_check.sh --hosts 2 --nproc 1 --job benchmarks/window.py --keep-logs
# which runs commux's side on the harness's hosts. The hosts: benchmarks/mpi_hosts.sh.
#
#   benchmarks/window_mpi_hosts.sh [SIZES [BLOCKS [SECONDS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${1:-8,1024,65536,1048576,16777216,67108864}
BLOCKS=${2:-5}
SECONDS_PER_BLOCK=${3:-0.2}
PY=$(${PYTHON:-python3} -c 'import sys; print(sys.executable)')
exec benchmarks/mpi_hosts.sh --mca osc ucx -- "$PY" -m commux.bench.window_mpi "$SIZES" "$BLOCKS" "$SECONDS_PER_BLOCK"
