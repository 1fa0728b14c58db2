#!/usr/bin/env bash
# benchmarks/halo.py across two namespace "hosts" (benchmarks/mpi_hosts.sh: one rank each,
# joined by veths, TCP between them for commux's UCX, Open MPI and gloo alike): commux.halo
# beside the hand-written exchanges and MPI_Neighbor_alltoallw, as on one host.
#
#   benchmarks/halo_hosts.sh [halo.py arguments]      e.g. --ndim 3 --sizes 8,32,64
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(${PYTHON:-python3} -c 'import sys; print(sys.executable)')
exec benchmarks/mpi_hosts.sh --mca pml ob1 --mca osc ^ucx -x MASTER_ADDR=10.214.0.10 -x MASTER_PORT=29655 \
    -x GLOO_SOCKET_IFNAME=eth0 -- "$PY" benchmarks/halo.py --mpi "$@"
