#!/usr/bin/env bash
# p2p 8 B one way from C++ and from the C API beside Open MPI's C API, five times each, and
# the median of the five ratios (a run's ratio holds on this noisy machine; absolute times
# drift between runs):
#  - C++: commux_bench --blocking (commux's C++ API, sendBlocking/recvBlocking, two forked
#    ranks) against Open MPI C's p2p in `python3 -m commux.bench --mpi` of the same run
#    (its target line "commux_bench --blocking / Open MPI C"), ranks pinned as mpirun pins 2;
#  - C API: benchmarks/capi_vs_mpi.sh (both libraries in the same processes, blocks
#    alternating), 2 ranks.
#
#   benchmarks/p2p_vs_mpi_five.sh [core-only build dir, default build/core-only]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/core-only}
out=$(mktemp -d /tmp/commux-p2p-five-XXXXXX)
trap 'rm -rf "$out"' EXIT
cpp=() capi=()
for run in 1 2 3 4 5; do
  python3 -m commux.bench --mpi --ops p2p --ranks 2 --min-bytes 8 --max-bytes 8 --backends ucx \
    --no-raw-ucx --no-plot --quiet --pinning pinned --out "$out/bench$run" > "$out/bench$run.log" 2>&1
  r=$(grep -A1 "commux_bench --blocking / Open MPI C" "$out/bench$run.log" | sed -n 's/.* = \([0-9.]*\)$/\1/p')
  line=$(grep -A1 "commux_bench --blocking / Open MPI C" "$out/bench$run.log" | tail -1 | sed 's/^ *//')
  cpp+=("$r")
  echo "run $run C++:   $line"
  c=$(benchmarks/capi_vs_mpi.sh "$build" 7 0.1 2>&1 | awk '/^2 ranks/{two=1} two && $1=="p2p"{print $3, $4, $5; exit}')
  capi+=("$(echo "$c" | awk '{print $3}')")
  echo "run $run C API: commux C $(echo "$c" | awk '{print $1}') us / Open MPI C $(echo "$c" | awk '{print $2}') us = $(echo "$c" | awk '{print $3}')"
done
median() { printf '%s\n' "$@" | sort -g | sed -n 3p; }
echo "C++ (commux_bench --blocking / Open MPI C), ratios: ${cpp[*]}; median $(median "${cpp[@]}")"
echo "C API (commuxSend/Recv / Open MPI C, same processes), ratios: ${capi[*]}; median $(median "${capi[@]}")"
