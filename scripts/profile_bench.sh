#!/usr/bin/env bash
# A commux.bench world under a system-wide profile, to explain one slow point afterwards:
#   scripts/profile_bench.sh OUT [commux.bench arguments...]
# writes OUT/perf.data (perf record -a -g, wall-clock timestamps) and OUT/bench.log, whose
# lines carry the wall-clock second each point finished. A point ran between its line's
# time and the line before it:
#   perf report -i OUT/perf.data --time START,END --no-children --sort comm,dso,sym
# Needs perf (Debian: linux-perf) and root or perf_event_paranoid <= -1.
set -euo pipefail
out=${1:?usage: scripts/profile_bench.sh OUT [commux.bench arguments]}
shift
mkdir -p "$out"
seconds=${PROFILE_SECONDS:-300}  # the profile's length: long enough for the world
perf record -k CLOCK_REALTIME -a -g -F 499 -o "$out/perf.data" -- sleep "$seconds" >/dev/null 2>&1 &
perf_pid=$!
trap 'kill -INT $perf_pid 2>/dev/null || true' EXIT
sleep 1
python3 -m commux.bench --out "$out/bench" "$@" 2>&1 |
  python3 -u -c 'import sys, time
for line in sys.stdin:
    print(f"{time.time():.3f} {line}", end="")' | tee "$out/bench.log"
kill -INT "$perf_pid" 2>/dev/null || true
wait "$perf_pid" 2>/dev/null || true
trap - EXIT
echo "profile: $out/perf.data; point times: $out/bench.log"
