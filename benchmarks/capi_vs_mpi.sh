#!/usr/bin/env bash
# commux's C API beside Open MPI's C API (benchmarks/c/capi_vs_mpi.c) at 2 and 4 ranks on
# this host: p2p 8 B one way, allreduce 8 B, 1 MiB and 64 MiB. Installs the torch-free
# build (default build/core-only, made by scripts/test_core.sh) into a scratch prefix,
# compiles the benchmark with mpicc against it (pkg-config), runs it under mpirun.
# Open MPI runs its shared-memory path (pml ob1, btl self,vader): its UCX pml would load a
# second UCX into the process beside the one commux uses.
#
#   benchmarks/capi_vs_mpi.sh [build-dir] [ROUNDS] [BLOCK_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/core-only}
rounds=${2:-7}
block=${3:-0.2}
command -v mpicc >/dev/null || { echo "needs Open MPI (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
work=$(mktemp -d /tmp/commux-capi-mpi-XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
export PKG_CONFIG_PATH="$(dirname "$(find "$work/prefix" -name commux.pc)")"
mpicc -O2 -std=c99 -D_POSIX_C_SOURCE=199309L benchmarks/c/capi_vs_mpi.c \
  $(pkg-config --cflags --libs commux) -o "$work/capi_vs_mpi"
for ranks in 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$ranks" --mca pml ob1 --mca btl self,vader \
    "$work/capi_vs_mpi" "$rounds" "$block"
  echo
done
