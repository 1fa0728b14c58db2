#!/usr/bin/env bash
# p2p 8 B one way from C++ and from the C API beside Open MPI's C API, five times each, and
# the median of the five ratios (a run's ratio holds on this noisy machine; absolute times
# drift between runs):
#  - C++: commux_bench --blocking (commux's C++ API, sendBlocking/recvBlocking, two forked
#    ranks) against Open MPI C's p2p in `python3 -m commux.bench --mpi` of the same run
#    (its target line "commux_bench --blocking / Open MPI C"; the MPI ranks bound to a core
#    each, commux_bench's two forked ranks as the kernel places them);
#  - C API: benchmarks/capi_vs_mpi.sh (both libraries in the same processes, blocks
#    alternating), 2 ranks.
#
#   benchmarks/p2p_vs_mpi_five.sh [core-only build dir, default build/core-only]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/core-only}
out=$(mktemp -d /tmp/commux-p2p-five-XXXXXX)
# Kept when a run fails: its logs say why.
trap 'if [ $? -eq 0 ]; then rm -rf "$out"; else echo "logs kept in $out" >&2; fi' EXIT
cpp=() capi=()
for run in 1 2 3 4 5; do
  if ! python3 -m commux.bench --mpi --ops p2p --ranks 2 --min-bytes 8 --max-bytes 8 --backends ucx \
      --no-raw-ucx --no-plot --quiet --pinning pinned --out "$out/bench$run" > "$out/bench$run.log" 2>&1; then
    echo "run $run: commux.bench failed (tail of $out/bench$run.log):" >&2
    tail -20 "$out/bench$run.log" >&2
    exit 1
  fi
  r=$(grep -A1 "commux_bench --blocking / Open MPI C" "$out/bench$run.log" | sed -n 's/.* = \([0-9.]*\)$/\1/p' || true)
  line=$(grep -A1 "commux_bench --blocking / Open MPI C" "$out/bench$run.log" | tail -1 | sed 's/^ *//' || true)
  cpp+=("$r")
  echo "run $run C++:   $line"
  benchmarks/capi_vs_mpi.sh "$build" 7 0.1 > "$out/capi$run.log" 2>&1 || {
    echo "run $run: capi_vs_mpi.sh failed (tail of $out/capi$run.log):" >&2
    tail -20 "$out/capi$run.log" >&2
    exit 1
  }
  c=$(awk '/^2 ranks/{two=1} two && !done && $1=="p2p"{print $3, $4, $5; done=1}' "$out/capi$run.log")
  [ -n "$r" ] && [ -n "$c" ] || { echo "run $run: no p2p 8 B ratio in the logs ($out)" >&2; exit 1; }
  capi+=("$(echo "$c" | awk '{print $3}')")
  echo "run $run C API: commux C $(echo "$c" | awk '{print $1}') us / Open MPI C $(echo "$c" | awk '{print $2}') us = $(echo "$c" | awk '{print $3}')"
done
median() { printf '%s\n' "$@" | sort -g | sed -n 3p; }
echo "C++ (commux_bench --blocking / Open MPI C), ratios: ${cpp[*]}; median $(median "${cpp[@]}")"
echo "C API (commuxSend/Recv / Open MPI C, same processes), ratios: ${capi[*]}; median $(median "${capi[@]}")"
