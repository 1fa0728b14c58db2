#!/usr/bin/env bash
# A/B of two torch-free builds' C API: benchmarks/capi_vs_mpi.sh with each build in turn
# (A B A B ...), Open MPI beside each as the yardstick. Per point it prints the median of
# each build's commux/MPI ratios and B/A = the quotient of those medians (below 1: B is
# faster), so a machine that drifts between runs moves both alike.
#
#   benchmarks/capi_ab.sh A_BUILD_DIR B_BUILD_DIR [RUNS] [ROUNDS] [BLOCK_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1
b=$2
runs=${3:-3}
rounds=${4:-5}
block=${5:-0.2}
out=$(mktemp -d /tmp/commux-capi-ab-XXXXXX)
trap 'rm -rf "$out"' EXIT
for i in $(seq 1 "$runs"); do
  benchmarks/capi_vs_mpi.sh "$a" "$rounds" "$block" >"$out/a.$i"
  benchmarks/capi_vs_mpi.sh "$b" "$rounds" "$block" >"$out/b.$i"
done
python3 - "$out" "$runs" <<'PY'
import re, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def read(path):
    points, ranks = {}, None
    for line in open(path):
        m = re.match(r"(\d+) ranks,", line)
        if m:
            ranks = int(m.group(1))
            continue
        f = line.split()
        if len(f) == 5 and f[1].isdigit():
            points[(ranks, f[0], int(f[1]))] = float(f[4])
    return points
a = [read(f"{out}/a.{i}") for i in range(1, runs + 1)]
b = [read(f"{out}/b.{i}") for i in range(1, runs + 1)]
print(f"{'ranks':>5} {'op':<10} {'bytes':>10} {'A commux/MPI':>13} {'B commux/MPI':>13} {'B/A':>6}")
for key in sorted(a[0]):
    ma = statistics.median(r[key] for r in a)
    mb = statistics.median(r[key] for r in b)
    print(f"{key[0]:>5} {key[1]:<10} {key[2]:>10} {ma:>13.2f} {mb:>13.2f} {mb / ma:>6.2f}")
PY
